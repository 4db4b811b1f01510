//! revl's egress proxy (docs/user-guide.md §8). It runs in revl (the host's network namespace) and
//! accepts on a listening socket the sandbox made inside its own namespace and handed over,
//! so the command reaches it at `127.0.0.1:3128` and nowhere else.
//!
//! Each client connection carries one request head: `CONNECT host:port` (a tunnel: any TLS
//! client) or a plain HTTP request in absolute form (`GET http://host:port/path`). The proxy
//! resolves names itself and checks the destination against the requested set; a refused
//! attempt is recorded (`net-connect {denied: true, why}`) and answered `403`, forwarding
//! nothing. An admitted one is recorded (`net-connect {dest, port, resolved}`, made durable by
//! the sink) BEFORE the outbound connection is opened, then relayed, one thread per
//! direction, through `splice(2)` (kernel-side copies, no user-space buffer), and recorded
//! `net-close {bytesUp, bytesDown}` when both directions end.

use super::{non_public, parse_host, Connection, Dest, Host};
use crate::wal::Record;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Appends one record to the WAL, durably, before returning (`Err`: it could not).
pub type Sink = Arc<dyn Fn(Record) -> Result<(), String> + Send + Sync>;

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;
/// Client connections served at once (each holds a thread or two): past it a connection
/// is answered `503` and nothing is recorded or forwarded.
const MAX_OPEN: usize = 256;
/// Bytes moved per splice call (and the pipe's size).
const CHUNK: usize = 1 << 20;

struct Shared {
    allowed: Vec<Dest>,
    sink: Sink,
    step: u64,
    next_conn: AtomicU64,
    open: std::sync::atomic::AtomicUsize,
    stopping: AtomicBool,
    /// Open sockets (client and server side) by connection, to cut at the end.
    live: Mutex<HashMap<u64, Vec<TcpStream>>>,
    handlers: Mutex<Vec<JoinHandle<()>>>,
    /// The first WAL failure: the exec reports it.
    error: Mutex<Option<String>>,
}

/// A running proxy; [`Proxy::finish`] stops it and says what it did.
pub struct Proxy {
    listener: Arc<TcpListener>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Serve on `listener` (a listening TCP socket), admitting `allowed`; every record goes
    /// through `sink`, tagged with the exec's `step`.
    pub fn start(
        listener: OwnedFd,
        allowed: Vec<Dest>,
        step: u64,
        sink: Sink,
    ) -> std::io::Result<Proxy> {
        let listener = Arc::new(TcpListener::from(listener));
        listener.set_nonblocking(false)?;
        let shared = Arc::new(Shared {
            allowed,
            sink,
            step,
            next_conn: AtomicU64::new(1),
            open: std::sync::atomic::AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            live: Mutex::new(HashMap::new()),
            handlers: Mutex::new(Vec::new()),
            error: Mutex::new(None),
        });
        let (l, sh) = (listener.clone(), shared.clone());
        let accept = std::thread::Builder::new()
            .name("revl-egress".into())
            .spawn(move || accept_loop(&l, &sh))?;
        Ok(Proxy {
            listener,
            accept: Some(accept),
            shared,
        })
    }

    /// Stop accepting, cut what is still open (the command has ended) and wait for every
    /// connection's records; `Err` when a record could not be written. What the proxy did
    /// is what its records say ([`super::NetSummary::from_records`]): nothing is kept beside them.
    pub fn finish(mut self) -> Result<(), String> {
        self.stop();
        match lock(&self.shared.error).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the blocked accept (Linux: it returns EINVAL on a shut-down listener).
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Both);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for socks in lock(&self.shared.live).values() {
            for s in socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let handlers = std::mem::take(&mut *lock(&self.shared.handlers));
        for h in handlers {
            let _ = h.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.stop();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(l: &TcpListener, sh: &Arc<Shared>) {
    loop {
        let client = match l.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) if sh.stopping.load(Ordering::SeqCst) => return,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                if sh.stopping.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
        };
        if sh.stopping.load(Ordering::SeqCst) {
            return;
        }
        if sh.open.load(Ordering::SeqCst) >= MAX_OPEN {
            let mut c = client;
            reply(
                &mut c,
                "503 Service Unavailable",
                "revl: too many connections open through the egress proxy at once (256)",
            );
            continue;
        }
        sh.open.fetch_add(1, Ordering::SeqCst);
        let sh2 = sh.clone();
        match std::thread::Builder::new()
            .name("revl-egress-conn".into())
            .spawn(move || {
                serve(client, &sh2);
                sh2.open.fetch_sub(1, Ordering::SeqCst);
            }) {
            Ok(h) => {
                let mut hs = lock(&sh.handlers);
                // Finished handlers are joined as new ones come, so they do not pile up.
                hs.retain(|h| !h.is_finished());
                hs.push(h);
            }
            Err(_) => {
                sh.open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// A request's target.
struct Target {
    tunnel: bool,
    host: String,
    port: u16,
    /// Plain HTTP: the head to send the server (origin-form, `Connection: close`).
    head: Vec<u8>,
}

fn reply(client: &mut TcpStream, status: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    let _ = client.write_all(msg.as_bytes());
    let _ = client.shutdown(Shutdown::Write);
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Split `host[:port]` (IPv6 in brackets); `default` when there is no port.
fn authority(a: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let (h, p) = if let Some(rest) = a.strip_prefix('[') {
        let end = rest.find(']').ok_or("an IPv6 address without its `]`")?;
        let host = &rest[..end];
        let after = &rest[end + 1..];
        (
            host.to_string(),
            after.strip_prefix(':').map(|s| s.to_string()),
        )
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p.to_string())),
            None => (a.to_string(), None),
        }
    };
    let port = match p {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{p:?} is not a port"))?,
        None => default.ok_or("no port")?,
    };
    if h.is_empty() {
        return Err("no host".into());
    }
    Ok((h, port))
}

fn parse_request(head: &[u8]) -> Result<Target, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: {first:?}"));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, None)
            .map_err(|e| format!("CONNECT {target}: {e} (give host:port)"))?;
        return Ok(Target {
            tunnel: true,
            host,
            port,
            head: Vec::new(),
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "{method} {target}: revl's egress proxy takes CONNECT host:port or a plain HTTP request with an absolute http:// URI"
        ));
    };
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let auth = auth.rsplit_once('@').map_or(auth, |x| x.1);
    let (host, port) = authority(auth, Some(80)).map_err(|e| format!("{target}: {e}"))?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for l in lines {
        if l.is_empty() {
            continue;
        }
        let name = l.split(':').next().unwrap_or_default().trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Target {
        tunnel: false,
        host,
        port,
        head: out.into_bytes(),
    })
}

/// Where a connection to `host:port` may go: the address to connect to, or why not.
fn admit(allowed: &[Dest], host: &str, port: u16) -> Result<SocketAddr, String> {
    let h = parse_host(host)?;
    let shown = Dest {
        host: h.clone(),
        port,
    }
    .to_string();
    if !allowed.iter().any(|d| d.admits(&h, port)) {
        return Err(format!(
            "{shown} is not in the requested set (declare it in the manifest's [exec] net and ask for it with --net)"
        ));
    }
    match h {
        Host::Ip(ip) => Ok(SocketAddr::new(ip, port)),
        Host::Name(name) => {
            let addrs: Vec<SocketAddr> = (name.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| format!("{name} does not resolve: {e}"))?
                .collect();
            if let Some(bad) = addrs
                .iter()
                .find_map(|a| non_public(&a.ip()).map(|w| (a, w)))
            {
                return Err(format!(
                    "{name} resolves to {}, {}; only a literal address in the set reaches such an address",
                    bad.0.ip(),
                    bad.1
                ));
            }
            addrs
                .first()
                .copied()
                .ok_or_else(|| format!("{name} resolves to no address"))
        }
        Host::Wildcard(_) => Err(format!("{shown}: a wildcard is not a destination")),
    }
}

fn serve(mut client: TcpStream, sh: &Arc<Shared>) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    let _ = client.set_nodelay(true);
    let mut buf = vec![0u8; 8192];
    let mut have = 0;
    let end = loop {
        if let Some(e) = find_head_end(&buf[..have]) {
            break e;
        }
        if have == buf.len() {
            if buf.len() >= MAX_HEAD {
                reply(
                    &mut client,
                    "431 Request Header Fields Too Large",
                    "revl: the request head is over 64 KiB",
                );
                return;
            }
            buf.resize(buf.len() * 2, 0);
        }
        match client.read(&mut buf[have..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => have += n,
        }
    };
    let _ = client.set_read_timeout(None);
    let target = match parse_request(&buf[..end]) {
        Ok(t) => t,
        Err(why) => {
            reply(&mut client, "400 Bad Request", &format!("revl: {why}"));
            return;
        }
    };
    // The command has ended (a request read as the proxy stops): nothing more is recorded
    // or opened on its behalf.
    if sh.stopping.load(Ordering::SeqCst) {
        reply(
            &mut client,
            "503 Service Unavailable",
            "revl: the command has ended",
        );
        return;
    }
    let conn = sh.next_conn.fetch_add(1, Ordering::SeqCst);
    let dest = target
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = target.port;
    let ts = || Some(crate::util::now_rfc3339());
    let addr = match admit(&sh.allowed, &target.host, port) {
        Ok(a) => a,
        Err(why) => {
            let rec = Record::NetConnect {
                step: sh.step,
                conn,
                dest: dest.clone(),
                port,
                resolved: None,
                denied: true,
                why: Some(why.clone()),
                ts: ts(),
            };
            if let Err(e) = (sh.sink)(rec) {
                lock(&sh.error).get_or_insert(e);
            }
            reply(
                &mut client,
                "403 Forbidden",
                &format!("revl: refused: {why}"),
            );
            return;
        }
    };
    // Recorded, durably, before the connection is opened.
    let rec = Record::NetConnect {
        step: sh.step,
        conn,
        dest: dest.clone(),
        port,
        resolved: Some(addr.ip().to_string()),
        denied: false,
        why: None,
        ts: ts(),
    };
    if let Err(e) = (sh.sink)(rec) {
        lock(&sh.error).get_or_insert(e.clone());
        reply(
            &mut client,
            "503 Service Unavailable",
            &format!("revl: the connection could not be recorded, so it was not made: {e}"),
        );
        return;
    }
    let mut c = Connection {
        dest: dest.clone(),
        port,
        resolved: Some(addr.ip().to_string()),
        bytes_up: Some(0),
        bytes_down: Some(0),
        interrupted: false,
        error: None,
    };
    let close = |c: &Connection| {
        let rec = Record::NetClose {
            step: sh.step,
            conn,
            dest: c.dest.clone(),
            port: c.port,
            bytes_up: c.bytes_up.unwrap_or(0),
            bytes_down: c.bytes_down.unwrap_or(0),
            error: c.error.clone(),
            ts: ts(),
        };
        if let Err(e) = (sh.sink)(rec) {
            lock(&sh.error).get_or_insert(e);
        }
    };
    let mut server = match TcpStream::connect_timeout(&addr, Duration::from_secs(30)) {
        Ok(s) => s,
        Err(e) => {
            c.error = Some(format!("connect to {addr}: {e}"));
            close(&c);
            reply(
                &mut client,
                "502 Bad Gateway",
                &format!("revl: could not connect to {dest}:{port} ({addr}): {e}"),
            );
            return;
        }
    };
    let _ = server.set_nodelay(true);
    for sock in [&client, &server] {
        big_buffers(sock);
    }
    if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
        lock(&sh.live).insert(conn, vec![a, b]);
    }
    if sh.stopping.load(Ordering::SeqCst) {
        let _ = server.shutdown(Shutdown::Both);
    }
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    let leftover = &buf[end..have];
    let first = if target.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .and_then(|_| server.write_all(leftover))
            .map(|_| leftover.len())
    } else {
        server
            .write_all(&target.head)
            .and_then(|_| server.write_all(leftover))
            .map(|_| target.head.len() + leftover.len())
    };
    // A failed first write may still have reached the server in part: the connection
    // stays counted as reached either way.
    if let Ok(n) = first {
        up.fetch_add(n as u64, Ordering::SeqCst);
        std::thread::scope(|s| {
            s.spawn(|| pump(&client, &server, &up));
            pump(&server, &client, &down);
        });
    }
    lock(&sh.live).remove(&conn);
    c.bytes_up = Some(up.load(Ordering::SeqCst));
    c.bytes_down = Some(down.load(Ordering::SeqCst));
    close(&c);
}

/// 4 MiB socket buffers each way: fewer wake-ups per megabyte relayed (the kernel caps
/// them at `net.core.rmem_max`/`wmem_max`; failure leaves the defaults).
fn big_buffers(s: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(s, 4 << 20);
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(s, 4 << 20);
}

/// Copy `from` to `to` until `from` ends (then end `to`'s writing side), counting the bytes
/// in `n`: `splice(2)` through a pipe, or read/write where splice does not apply.
fn pump(from: &TcpStream, to: &TcpStream, n: &AtomicU64) {
    if splice_pump(from, to, n).is_err() {
        let mut buf = vec![0u8; 1024 * 1024];
        let (mut f, mut t) = (from, to);
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    if t.write_all(&buf[..k]).is_err() {
                        break;
                    }
                    n.fetch_add(k as u64, Ordering::SeqCst);
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    // The other direction may still be blocked reading: a reader that sees the end of its
    // peer's writing shuts that side too.
    let _ = from.shutdown(Shutdown::Read);
}

/// `Err` only when splice cannot be used at all (before a byte moved).
fn splice_pump(from: &TcpStream, to: &TcpStream, n: &AtomicU64) -> Result<(), ()> {
    let Ok((r, w)) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) else {
        return Err(());
    };
    // Failure only leaves the default size.
    let _ = rustix::pipe::fcntl_setpipe_size(&w, CHUNK);
    // No SPLICE_F_MORE: on a socket it corks a partial segment for up to 200 ms (as
    // MSG_MORE does), which a request-response exchange pays on every turn.
    let flags = rustix::pipe::SpliceFlags::MOVE;
    let mut moved_any = false;
    loop {
        let k = match rustix::pipe::splice(from, None, &w, None, CHUNK, flags) {
            Ok(0) => return Ok(()),
            Ok(k) => k,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::INVAL) if !moved_any => return Err(()),
            Err(_) => return Ok(()),
        };
        moved_any = true;
        let mut left = k;
        while left > 0 {
            let m = match rustix::pipe::splice(&r, None, to, None, left, flags) {
                Ok(0) => return Ok(()),
                Ok(m) => m,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return Ok(()),
            };
            left -= m;
            n.fetch_add(m as u64, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let t =
            parse_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert!(t.tunnel && t.host == "pypi.org" && t.port == 443);
        let t = parse_request(
            b"GET http://127.0.0.1:8080/simple/?q=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Connection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert!(!t.tunnel && t.host == "127.0.0.1" && t.port == 8080);
        let head = String::from_utf8(t.head).unwrap();
        assert!(head.starts_with("GET /simple/?q=1 HTTP/1.1\r\n"), "{head}");
        assert!(!head.contains("Proxy-Connection") && head.ends_with("Connection: close\r\n\r\n"));
        let t = parse_request(b"GET http://[::1]/ HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 80));
        assert!(parse_request(b"GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_request(b"CONNECT pypi.org HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn admission() {
        let allowed = vec![
            Dest::parse("127.0.0.1:8080").unwrap(),
            Dest::parse("localhost:8081").unwrap(),
        ];
        assert!(admit(&allowed, "127.0.0.1", 8080).is_ok());
        assert!(admit(&allowed, "127.0.0.1", 8081).is_err());
        let e = admit(&allowed, "localhost", 8081).unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        assert!(admit(&allowed, "localhost", 8080)
            .unwrap_err()
            .contains("not in the requested set"));
    }
}
