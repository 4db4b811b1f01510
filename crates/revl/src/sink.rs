//! A loopback HTTP sink: a real HTTP/1.1 server on 127.0.0.1 that receives sends and counts
//! them. `revl demo` uses it to show what crossed and when; the tests assert on its count and
//! bodies (never on a log line).
//!
//! Any request path answers `200 {"ok":true,"n":<count>}`, except a path that starts with
//! `/fail`, which answers 500, and `/slow`, which waits 5 s first.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub body: String,
}

#[derive(Clone)]
pub struct Sink {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Sink {
    /// Start on an ephemeral loopback port; serves until the process ends.
    pub fn start() -> std::io::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let g = g.clone();
                std::thread::spawn(move || serve(conn, g));
            }
        });
        Ok(Sink { port, got })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn count(&self) -> usize {
        self.got.lock().map(|g| g.len()).unwrap_or(0)
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

/// One HTTP/1.1 request as read from a connection (the body up to 16 MiB).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lowercased, values trimmed, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of a header (its name in lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Read the next request of a connection (`None` at its end or on a malformed request):
/// the loopback servers of the demo and the tests (this sink, the scripted model of
/// docs/agents.md) read requests this one way.
pub fn read_request(r: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("/").to_string(),
    );
    if method.is_empty() {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len.min(16 << 20)];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

fn serve(conn: TcpStream, got: Arc<Mutex<Vec<Received>>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut w = match conn.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut r = BufReader::new(conn);
    loop {
        let Some(req) = read_request(&mut r) else {
            return;
        };
        let key = req.header("idempotency-key").map(str::to_string);
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let Request {
            method, path, body, ..
        } = req;
        if path.starts_with("/slow") {
            std::thread::sleep(Duration::from_secs(5));
        }
        let n = {
            let mut g = match got.lock() {
                Ok(g) => g,
                Err(_) => return,
            };
            g.push(Received {
                method,
                path: path.clone(),
                idempotency_key: key,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
            g.len()
        };
        let (status, text) = if path.starts_with("/fail") {
            (
                "500 Internal Server Error",
                format!("{{\"ok\":false,\"n\":{n}}}"),
            )
        } else {
            ("200 OK", format!("{{\"ok\":true,\"n\":{n}}}"))
        };
        let resp = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}", text.len());
        if w.write_all(resp.as_bytes()).is_err() || close {
            return;
        }
    }
}
