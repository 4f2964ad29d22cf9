#!/usr/bin/env python3
"""WAL pages a new plan costs in a SQLite store, by the B-tree each page belongs to.

Replays what the store's group-commit writer does (crates/plansmith-store/src/group.rs): commits
of BATCH new plans, each one row in `plans` and its version 1 in `plan_versions`, with the
schema and one plan row copied from a real store. It then reads the WAL's frame headers back and
counts the pages written per plan, by owner (`dbstat`). A model, not the server: it shows where
the commit's page writes go, and what a schema or row change would save, without a load test.

    cargo build --release -p plansmith --no-default-features
    target/release/plansmith plan "Email Bob the weather in Paris" --tools examples/tools.json \\
        --model scripted:examples/replies/weather-email-repeat.json --save --store sqlite:/tmp/one.db
    scripts/wal-pages.py /tmp/one.db [--batch 13] [--commits 200] [--warm 3000]

`--warm` commits are written first (and checkpointed), so that the B-trees have the depth of a
store that holds some plans; `--review-bytes N` pads or cuts the review JSON to N bytes, and
`--without-rowid-versions` makes `plan_versions` a `WITHOUT ROWID` table (clustered on its key).
"""

import argparse
import collections
import datetime
import os
import sqlite3
import struct
import sys
import tempfile

# The first plan's time, and the store's format for times (RFC 3339, microseconds, `Z`).
START = datetime.datetime(2026, 11, 29)
TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="a SQLite plan store holding at least one plan")
    ap.add_argument("--batch", type=int, default=13, help="plans per commit (13: the load test's)")
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--warm", type=int, default=3000, help="commits written before counting")
    ap.add_argument("--review-bytes", type=int, help="the review JSON's length instead of the row's")
    ap.add_argument("--without-rowid-versions", action="store_true",
                    help="plan_versions as a WITHOUT ROWID table")
    args = ap.parse_args()
    if args.batch < 1 or args.commits < 1 or args.warm < 0:
        sys.exit("wal-pages: --batch and --commits must be at least 1, --warm at least 0")
    if not os.path.exists(args.store):
        sys.exit(f"wal-pages: no store at {args.store} (see the usage at the top of this script)")

    src = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True)
    schema = [
        sql
        for (sql,) in src.execute(
            "SELECT sql FROM sqlite_schema WHERE tbl_name IN ('plans', 'plan_versions') "
            "AND sql IS NOT NULL ORDER BY type DESC, name"
        )
    ]
    row = src.execute(
        "SELECT p.state, p.title, p.document, p.review, v.trigger_kind, v.actor FROM plans p "
        "JOIN plan_versions v ON v.plan_id = p.id AND v.version = 1 LIMIT 1"
    ).fetchone()
    if row is None:
        sys.exit(f"wal-pages: {args.store} holds no plan with a version 1")

    with tempfile.TemporaryDirectory(prefix="wal-pages.") as work:
        count(args, os.path.join(work, "plans.db"), schema, row)


def count(args, path, schema, row):
    """Writes the commits into a new store at `path` and prints its WAL pages by B-tree."""
    state, title, document, review, trigger, actor = row
    if args.review_bytes is not None:
        review = (review + " " * args.review_bytes)[: args.review_bytes]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    for sql in schema:
        if args.without_rowid_versions and sql.startswith("CREATE TABLE plan_versions"):
            sql += " WITHOUT ROWID"
        db.execute(sql)

    made = 0

    def commits(count):
        nonlocal made
        for _ in range(count):
            db.execute("BEGIN IMMEDIATE")
            for _ in range(args.batch):
                made += 1
                # Time-ordered ids and times, as the server makes them (UUIDv7, microseconds).
                plan_id = "plan-%032x" % ((0x019AD << 108) + made * 7919)
                at = (START + datetime.timedelta(microseconds=made)).strftime(TIME)
                db.execute(
                    "INSERT INTO plans (id, version, state, owner, conversation_id, thread_id, "
                    "title, document, review, created_at, updated_at) "
                    "VALUES (?, 1, ?, NULL, NULL, NULL, ?, ?, ?, ?, ?)",
                    (plan_id, state, title, document, review, at, at),
                )
                db.execute(
                    "INSERT INTO plan_versions (plan_id, version, parent_version, trigger_kind, "
                    "actor, created_at, state, diff, document) "
                    "VALUES (?, 1, NULL, ?, ?, ?, ?, '', '')",
                    (plan_id, trigger, actor, at, state),
                )
            db.execute("COMMIT")

    commits(args.warm)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    commits(args.commits)

    with open(path + "-wal", "rb") as wal:
        data = wal.read()
    page_size = struct.unpack(">I", data[8:12])[0]
    pages = []
    at = 32
    while at + 24 + page_size <= len(data):
        pages.append(struct.unpack(">I", data[at : at + 4])[0])
        at += 24 + page_size
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    owner = {
        pageno: (name if pageno != 1 else "page 1 (header)", kind)
        for name, pageno, kind in db.execute("SELECT name, pageno, pagetype FROM dbstat")
    }
    plans = args.commits * args.batch
    by_owner = collections.Counter(owner.get(p, ("?", "?")) for p in pages)
    print(
        f"{len(pages) / plans:.2f} WAL pages per plan ({len(pages)} in {args.commits} commits of "
        f"{args.batch}; row: document {len(document)} B, review {len(review)} B; "
        f"{os.path.getsize(path) // made} B on disk per plan)"
    )
    print(f"{'per plan':>9} {'per commit':>10}  B-tree (page kind)")
    for (name, kind), count in by_owner.most_common():
        print(f"{count / plans:9.3f} {count / args.commits:10.2f}  {name} ({kind})")
    db.close()


if __name__ == "__main__":
    main()
