"""Runs a command on a pseudo-terminal of 100 x 30, as a person at a terminal would, and types
Ctrl-C once the file PIDFILE is written (0.3 s later). Prints the command's exit code on the
first line, then everything the terminal received.

    python3 terminal.py PIDFILE COMMAND [ARG...]
"""

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

pidfile, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
out = b""
typed = False
while True:
    if not typed and os.path.exists(pidfile) and os.path.getsize(pidfile) > 0:
        time.sleep(0.3)
        os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to its foreground group
        typed = True
    ready, _, _ = select.select([fd], [], [], 0.05)
    if ready:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the command ended and closed the terminal
            break
        if not chunk:
            break
        out += chunk
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
sys.stdout.write(out.decode("utf-8", "replace"))
