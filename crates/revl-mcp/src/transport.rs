//! Newline-delimited JSON-RPC over a byte stream (stdio), written for this server rather
//! than taken from rmcp's stdio transport, because of three rules of docs/mcp.md ("How the
//! server acts"):
//!
//! - malformed JSON-RPC gets a JSON-RPC error: a line that is not JSON is answered with
//!   `-32700 Parse error`, JSON that is not a JSON-RPC message with `-32600 Invalid Request`
//!   (carrying the request's `id` when one can be read), and the server keeps serving;
//! - content of up to 16 MiB per call must reach the tool, which refuses anything larger
//!   with a clean tool error; so a line may be up to [`MAX_LINE`] bytes (16 MiB of content
//!   escaped as JSON can take six bytes per byte). A longer line is never buffered whole:
//!   it is skipped, and answered with `-32600` carrying its `id` when its first or last
//!   bytes show one, so a client waiting on that request hears back;
//! - messages a client may send before `initialize` that rmcp would treat as fatal
//!   (a notification or a response before any request) are dropped with a note on stderr.
//!
//! Nothing here ever writes anything but JSON-RPC messages to the output.

use rmcp::model::{ErrorData, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The longest line (one JSON-RPC message) that is parsed: 128 MiB.
pub const MAX_LINE: usize = 128 * 1024 * 1024;

/// How many bytes of an oversized line are kept at each end to look for its `id`.
const ID_WINDOW: usize = 64 * 1024;

/// One outcome of reading a line.
enum LineRead {
    Line,
    Oversized(Option<RequestId>),
    Eof,
    Io(std::io::Error),
}

/// An oversized line being skipped: its first and (so far) last bytes.
#[derive(Default)]
struct Skipping {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Skipping {
    fn keep(&mut self, chunk: &[u8]) {
        if self.head.len() < ID_WINDOW {
            let n = (ID_WINDOW - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..n]);
        }
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * ID_WINDOW {
            self.tail.drain(..self.tail.len() - ID_WINDOW);
        }
    }

    fn id(&self) -> Option<RequestId> {
        id_in_head(&self.head).or_else(|| id_in_tail(&self.tail))
    }
}

pub struct LineTransport<R, W> {
    reader: BufReader<R>,
    line: Vec<u8>,
    skipping: Option<Skipping>,
    writer: Arc<Mutex<W>>,
    max_line: usize,
    /// A request other than `ping` has been passed on: the MCP lifecycle has begun.
    begun: bool,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            reader: BufReader::new(read),
            line: Vec::new(),
            skipping: None,
            writer: Arc::new(Mutex::new(write)),
            max_line: MAX_LINE,
            begun: false,
        }
    }

    /// Read one line into `self.line` without letting it grow past `max_line`. Cancel-safe:
    /// bytes are moved out of the reader only together with their bookkeeping, with no
    /// await in between, so a dropped call resumes where it stopped.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (used, done) = {
                let buf = match self.reader.fill_buf().await {
                    Ok(b) => b,
                    Err(e) => return LineRead::Io(e),
                };
                if buf.is_empty() {
                    return LineRead::Eof;
                }
                let newline = buf.iter().position(|&b| b == b'\n');
                let take = newline.map_or(buf.len(), |i| i + 1);
                let chunk = &buf[..take];
                if let Some(skip) = self.skipping.as_mut() {
                    skip.keep(chunk);
                } else if self.line.len() + take > self.max_line {
                    let mut skip = Skipping::default();
                    skip.keep(&self.line);
                    skip.keep(chunk);
                    self.line.clear();
                    self.skipping = Some(skip);
                } else {
                    self.line.extend_from_slice(chunk);
                }
                (take, newline.is_some())
            };
            self.reader.consume(used);
            if done {
                if let Some(skip) = self.skipping.take() {
                    return LineRead::Oversized(skip.id());
                }
                return LineRead::Line;
            }
        }
    }

    /// Send a message from inside `receive` without awaiting it there (keeps `receive`
    /// cancel-safe).
    fn reply(&self, msg: TxJsonRpcMessage<RoleServer>) {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = write_message(&writer, &msg).await {
                eprintln!("revl mcp: cannot write a reply: {e}");
            }
        });
    }
}

async fn write_message<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    msg: &TxJsonRpcMessage<RoleServer>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let mut w = writer.lock().await;
    w.write_all(&bytes).await?;
    w.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move { write_message(&writer, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Eof => return None,
                LineRead::Io(e) => {
                    eprintln!("revl mcp: cannot read stdin: {e}");
                    return None;
                }
                LineRead::Oversized(id) => {
                    eprintln!(
                        "revl mcp: dropped a message longer than {} bytes",
                        self.max_line
                    );
                    self.reply(TxJsonRpcMessage::<RoleServer>::error(
                        ErrorData::invalid_request(
                            format!(
                                "message too large: one JSON-RPC message may take at most {} MiB (file content at most 16 MiB per call)",
                                self.max_line / (1024 * 1024)
                            ),
                            None,
                        ),
                        id,
                    ));
                    continue;
                }
            }
            let raw = std::mem::take(&mut self.line);
            let mut bytes: &[u8] = &raw;
            while let Some(b) = bytes
                .strip_suffix(b"\n")
                .or_else(|| bytes.strip_suffix(b"\r"))
            {
                bytes = b;
            }
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = match serde_json::from_slice(bytes) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!(
                        "revl mcp: a line that is not JSON was answered with a parse error: {e}"
                    );
                    self.reply(TxJsonRpcMessage::<RoleServer>::error(
                        ErrorData::parse_error(format!("parse error: not JSON ({e})"), None),
                        None,
                    ));
                    continue;
                }
            };
            drop(raw);
            let id = value.get("id").and_then(request_id);
            let method = value
                .get("method")
                .and_then(Value::as_str)
                .map(str::to_string);
            let is_v2 = value.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
            match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
                Ok(msg) => {
                    if !self.begun {
                        match (&msg, method.as_deref()) {
                            (RxJsonRpcMessage::<RoleServer>::Request(_), Some("ping")) => {}
                            (RxJsonRpcMessage::<RoleServer>::Request(_), _) => self.begun = true,
                            _ => {
                                eprintln!(
                                    "revl mcp: dropped a message that came before initialize: {}",
                                    method.as_deref().unwrap_or("a response")
                                );
                                continue;
                            }
                        }
                    }
                    return Some(msg);
                }
                Err(e) => {
                    if is_v2 && method.is_some() && id.is_none() {
                        // A notification this server does not know: notifications are
                        // never answered, not even with an error.
                        eprintln!("revl mcp: ignored notification {:?}: {e}", method);
                        continue;
                    }
                    let why = if is_v2 {
                        format!("not a JSON-RPC 2.0 message this server understands ({e})")
                    } else {
                        "a JSON-RPC message must carry \"jsonrpc\": \"2.0\"".to_string()
                    };
                    eprintln!("revl mcp: answered an invalid JSON-RPC message: {why}");
                    self.reply(TxJsonRpcMessage::<RoleServer>::error(
                        ErrorData::invalid_request(format!("invalid request: {why}"), None),
                        id,
                    ));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut w = self.writer.lock().await;
        w.flush().await
    }
}

/// A JSON-RPC id: an integer or a string.
fn request_id(v: &Value) -> Option<RequestId> {
    serde_json::from_value::<RequestId>(v.clone())
        .ok()
        .filter(|_| v.is_i64() || v.is_u64() || v.is_string())
}

/// The top-level `"id"` of a JSON object from its first bytes (a client that writes `id`
/// before `params`).
fn id_in_head(b: &[u8]) -> Option<RequestId> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i)?;
                if depth == 1 && &b[i..=end] == b"\"id\"" {
                    let mut j = end + 1;
                    while j < b.len() && b[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    if b.get(j) == Some(&b':') {
                        return scalar_at(b, j + 1);
                    }
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The top-level `"id"` of a JSON object from its last bytes (a client that writes `id`
/// last): the line must end with `"id": <integer or simple string> }`.
fn id_in_tail(b: &[u8]) -> Option<RequestId> {
    let t = trim_end(b);
    let t = trim_end(t.strip_suffix(b"}")?);
    // The value: an integer or a string without escapes.
    let start = if t.last() == Some(&b'"') {
        let inner = &t[..t.len() - 1];
        let q = inner.iter().rposition(|&c| c == b'"')?;
        if inner[q..].contains(&b'\\') {
            return None;
        }
        q
    } else {
        let q = t
            .iter()
            .rposition(|c| !(c.is_ascii_digit() || *c == b'-'))?;
        q + 1
    };
    let value = &t[start..];
    let before = trim_end(&t[..start]);
    let before = trim_end(before.strip_suffix(b":")?);
    if !before.ends_with(b"\"id\"") {
        return None;
    }
    let prev = trim_end(&before[..before.len() - 4]);
    if !matches!(prev.last(), Some(b',') | Some(b'{')) {
        return None;
    }
    let v: Value = serde_json::from_slice(value).ok()?;
    request_id(&v)
}

fn trim_end(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &b[..n]
}

/// Index of the closing quote of the string that opens at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// An integer or a string value starting at `from` (after whitespace).
fn scalar_at(b: &[u8], from: usize) -> Option<RequestId> {
    let mut i = from;
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    let end = if b.get(i) == Some(&b'"') {
        string_end(b, i)? + 1
    } else {
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'-') {
            j += 1;
        }
        j
    };
    let v: Value = serde_json::from_slice(b.get(i..end)?).ok()?;
    request_id(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(n: i64) -> Option<RequestId> {
        Some(RequestId::Number(n))
    }

    #[test]
    fn id_found_in_head_only_at_top_level() {
        assert_eq!(
            id_in_head(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"#),
            num(7)
        );
        assert_eq!(
            id_in_head(br#"{"params":{"id":3,"x":"#),
            None,
            "an id inside params is not the request's"
        );
        assert_eq!(
            id_in_head(br#"{"method":"x\"id\":9","id" : "abc","#),
            Some(RequestId::String("abc".into()))
        );
    }

    #[test]
    fn id_found_in_tail_only_at_top_level() {
        assert_eq!(id_in_tail(br#"aaaa"},"jsonrpc":"2.0","id":12}"#), num(12));
        assert_eq!(
            id_in_tail(b"aaaa\"}, \"id\" : \"r-1\" }\n"),
            Some(RequestId::String("r-1".into()))
        );
        assert_eq!(
            id_in_tail(br#"aaa","id":12}}"#),
            None,
            "nested, not top level"
        );
        assert_eq!(id_in_tail(br#"aaaaaaaa"#), None);
    }
}
