//! The stdio transport, with every message checked before the MCP server sees it.
//!
//! rmcp reads newline-delimited JSON-RPC from stdin and drops, with a log line at most, a line
//! it cannot read: the client then waits for an answer that never comes. Here each line is read
//! first, at most [`MESSAGE_MAX`] bytes, and one that is not a JSON-RPC message MCP knows gets
//! its JSON-RPC error on stdout at once: `-32700` (not JSON) with a `null` id, `-32600` (not a
//! request, notification or response MCP defines) with the message's own id where it has one.
//! The messages that pass go on to rmcp unchanged; its answers and the errors share stdout one
//! whole line at a time.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest message read from stdin, in bytes; a longer line is answered with `-32600`.
pub(crate) const MESSAGE_MAX: usize = 8 * 1024 * 1024;

/// JSON-RPC's "Parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "Invalid Request".
const INVALID_REQUEST: i64 = -32600;

/// The JSON-RPC error answer to `line`, or `None` when rmcp can read it.
pub(crate) fn check(line: &[u8]) -> Option<Value> {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => {
            return Some(error(
                Value::Null,
                PARSE_ERROR,
                format!("parse error: the line is not JSON ({err})"),
            ));
        }
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
        .unwrap_or(Value::Null);
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(_) => None,
        Err(err) => Some(error(
            id,
            INVALID_REQUEST,
            format!("invalid request: not an MCP request, notification or response ({err})"),
        )),
    }
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Reads `input` a line at a time: lines [`check`] passes go to `server` (rmcp's side of the
/// transport), the others are answered through `errors`. Ends at the end of `input`, or when
/// the server side closes.
async fn read_lines<R, S>(input: R, mut server: S, errors: mpsc::Sender<Value>)
where
    R: AsyncRead + Unpin,
    S: AsyncWrite + Unpin,
{
    forward_lines(input, &mut server, errors).await;
    // The server reads the end of its input as the client's leaving.
    let _ = server.shutdown().await;
}

async fn forward_lines<R, S>(input: R, server: &mut S, errors: mpsc::Sender<Value>)
where
    R: AsyncRead + Unpin,
    S: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MESSAGE_MAX).unwrap_or(u64::MAX) + 1;
        let read = match (&mut input).take(limit).read_until(b'\n', &mut line).await {
            Ok(read) => read,
            Err(err) => {
                tracing::warn!(error = %err, "MCP stdio: cannot read stdin");
                return;
            }
        };
        if read == 0 {
            return;
        }
        if line.len() > MESSAGE_MAX && line.last() != Some(&b'\n') {
            // Too long: skip to the end of the line, then answer.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut input).take(limit).read_until(b'\n', &mut rest).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            let answer = error(
                Value::Null,
                INVALID_REQUEST,
                format!("invalid request: a message is at most {MESSAGE_MAX} bytes"),
            );
            if errors.send(answer).await.is_err() {
                return;
            }
            continue;
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match check(text) {
            None => {
                let passed = server.write_all(text).await.is_ok()
                    && server.write_all(b"\n").await.is_ok()
                    && server.flush().await.is_ok();
                if !passed {
                    return;
                }
            }
            Some(answer) => {
                if errors.send(answer).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Copies the server's answers (whole lines) and the error answers to `output` until both
/// end.
async fn write_lines<S, W>(server: S, mut output: W, mut errors: mpsc::Receiver<Value>)
where
    S: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut server = BufReader::new(server).lines();
    let (mut server_open, mut errors_open) = (true, true);
    while server_open || errors_open {
        let out = tokio::select! {
            read = server.next_line(), if server_open => match read {
                Ok(Some(line)) => Some(line),
                Ok(None) | Err(_) => {
                    server_open = false;
                    None
                }
            },
            answer = errors.recv(), if errors_open => match answer {
                Some(answer) => Some(answer.to_string()),
                None => {
                    errors_open = false;
                    None
                }
            },
        };
        let Some(mut out) = out else {
            continue;
        };
        out.push('\n');
        if output.write_all(out.as_bytes()).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// The guarded transport over `input` and `output`: the transport to give rmcp, and the task
/// that moves lines between the two (await it after the server ends, so its last answers are
/// written).
pub(crate) fn guard<R, W>(
    input: R,
    output: W,
) -> (
    (
        tokio::io::ReadHalf<tokio::io::DuplexStream>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ),
    tokio::task::JoinHandle<()>,
)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (from_server, to_server) = tokio::io::split(ours);
    let (errors_tx, errors_rx) = mpsc::channel(16);
    let task = tokio::spawn(async move {
        let reader = read_lines(input, to_server, errors_tx);
        let writer = write_lines(from_server, output, errors_rx);
        tokio::join!(reader, writer);
    });
    (tokio::io::split(theirs), task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_bad_line_gets_its_error() {
        let answer = check(b"{not json").unwrap();
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], PARSE_ERROR);

        let answer = check(br#"{"id": 7, "hello": "world"}"#).unwrap();
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);

        let answer = check(br#"[1, 2]"#).unwrap();
        assert_eq!(answer["id"], Value::Null);

        let ping = br#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#;
        assert!(check(ping).is_none());
    }

    #[tokio::test]
    async fn good_lines_reach_the_server_and_bad_ones_are_answered() {
        let (client, input) = tokio::io::duplex(4096);
        let (output, mut seen) = tokio::io::duplex(4096);
        let ((mut server_in, mut server_out), task) = guard(input, output);
        let (client_read, mut client_write) = tokio::io::split(client);
        client_write
            .write_all(b"garbage\n\n{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}\n")
            .await
            .unwrap();
        drop(client_write);
        drop(client_read);

        let mut got = String::new();
        server_in.read_to_string(&mut got).await.unwrap();
        assert_eq!(
            got,
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}\n"
        );
        server_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")
            .await
            .unwrap();
        drop(server_out);
        drop(server_in);
        task.await.unwrap();

        let mut written = String::new();
        seen.read_to_string(&mut written).await.unwrap();
        let lines: Vec<Value> = written
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{written}");
        assert_eq!(lines[0]["error"]["code"], PARSE_ERROR);
        assert_eq!(lines[1]["result"], json!({}));
    }
}
