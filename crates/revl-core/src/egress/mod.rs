//! Declared egress (docs/user-guide.md §8): the destinations a human declared in the manifest's
//! `[exec] net`, what a command asks for (`--net`, `--net=DEST`), and the rules the proxy
//! applies to each connection: a destination must be in the requested set, and a name that
//! resolves to an address that is not globally reachable (the IANA special-purpose
//! registries, [`special`]) is refused (only a literal address in the set reaches such an
//! address).

#[cfg(target_os = "linux")]
pub mod proxy;
pub mod special;

use crate::error::{Error, Result};
use serde::Serialize;
use std::net::IpAddr;

/// The address inside the sandbox where the command reaches revl's proxy.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";
/// The port of [`PROXY_ADDR`].
pub const PROXY_PORT: u16 = 3128;

/// What an exec asks of the network (`ExecOptions::net`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetRequest {
    /// No network (docs/user-guide.md, "Shell commands: `revl exec`"): the default.
    #[default]
    None,
    /// The whole declared set (`--net`, MCP `net: true`).
    All,
    /// A part of the declared set (`--net=DEST`, repeatable; MCP `net: ["DEST", ...]`).
    Only(Vec<String>),
}

/// The host part of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A host name, lower-case, without a trailing dot.
    Name(String),
    /// `*.domain`: any subdomain of `domain` at any depth, not the apex.
    Wildcard(String),
    /// A literal address.
    Ip(IpAddr),
}

/// One declared destination: a host and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    pub host: Host,
    pub port: u16,
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Wildcard(d) => write!(f, "*.{d}:{}", self.port),
            Host::Name(n) => f.write_str(&host_port(n, self.port)),
            Host::Ip(a) => f.write_str(&host_port(&a.to_string(), self.port)),
        }
    }
}

/// How revl names a destination: `host:port`, an IPv6 address in brackets (`[::1]:8080`).
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The label of an exec's network emission: `exec.net <program>` (the basename of argv[0]).
pub fn net_label(argv: &[String]) -> String {
    let name = argv
        .first()
        .map_or_else(String::new, |a| crate::util::program_name(a));
    format!("exec.net {}", crate::util::visible(&name, false))
}

/// A host as a connection names it (CONNECT's authority, an absolute URI's host): a literal
/// address (brackets allowed around IPv6) or a name, lower-cased.
pub fn parse_host(h: &str) -> std::result::Result<Host, String> {
    let inner = h
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(h);
    if let Ok(ip) = inner.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let name = h.trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("{h:?} is not a host name or an IP address"));
    }
    Ok(Host::Name(name))
}

impl Dest {
    /// `host:port`, `*.domain:port`, `1.2.3.4:port` or `[::1]:port`; the port is required.
    pub fn parse(s: &str) -> std::result::Result<Dest, String> {
        let t = s.trim();
        let (host, port) = match t.rfind(':') {
            Some(i) if !t[..i].contains(':') || t.starts_with('[') => (&t[..i], &t[i + 1..]),
            _ => {
                return Err(format!(
                    "{s:?} has no port (write host:port, e.g. pypi.org:443; an IPv6 address in brackets, [::1]:8080)"
                ))
            }
        };
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("{s:?}: {port:?} is not a port (1-65535)")),
        };
        let host = if let Some(d) = host.strip_prefix("*.") {
            match parse_host(d) {
                Ok(Host::Name(n)) => Host::Wildcard(n),
                _ => return Err(format!("{s:?}: `*.` must be followed by a domain name")),
            }
        } else if host.contains('*') {
            return Err(format!(
                "{s:?}: a wildcard is only allowed as a leading `*.` (any subdomain)"
            ));
        } else {
            parse_host(host).map_err(|e| format!("{s:?}: {e}"))?
        };
        if let Host::Ip(IpAddr::V6(_)) = host {
            if !t.starts_with('[') {
                return Err(format!(
                    "{s:?}: write an IPv6 address in brackets, [::1]:8080"
                ));
            }
        }
        Ok(Dest { host, port })
    }

    /// Does this declared entry admit a connection to `host:port`?
    pub fn admits(&self, host: &Host, port: u16) -> bool {
        if self.port != port {
            return false;
        }
        match (&self.host, host) {
            (Host::Name(a), Host::Name(b)) => a == b,
            (Host::Wildcard(d), Host::Name(b)) => {
                b.len() > d.len() + 1 && b.ends_with(&format!(".{d}"))
            }
            (Host::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }

    /// Is this entry (as asked for by `--net=DEST`) inside `other` (a declared entry)?
    fn within(&self, other: &Dest) -> bool {
        match &self.host {
            Host::Wildcard(d) => {
                self.port == other.port
                    && match &other.host {
                        Host::Wildcard(o) => d == o || d.ends_with(&format!(".{o}")),
                        _ => false,
                    }
            }
            h => other.admits(h, self.port),
        }
    }
}

/// The manifest's `[exec] net`, parsed (each entry checked).
pub fn parse_declared(list: &[String]) -> std::result::Result<Vec<Dest>, String> {
    list.iter().map(|s| Dest::parse(s)).collect()
}

/// The set a command may reach: the declared set (`All`), or the part of it asked for. A DEST
/// outside the declared set is `bad-args` (nothing runs).
pub fn requested(declared: &[String], req: &NetRequest) -> Result<Vec<Dest>> {
    let set = parse_declared(declared).map_err(|e| {
        Error::bad_args(
            format!("the manifest's [exec] net is invalid: {e}"),
            "fix the manifest's [exec] net (entries are host:port, *.domain:port or a literal IP with a port)",
        )
    })?;
    let none_declared = || {
        Error::bad_args(
            "--net asks for the network, but the manifest declares no destination ([exec] net is empty or absent)",
            "declare what commands may reach in the manifest, e.g. [exec] net = [\"pypi.org:443\"], and create the session with it",
        )
    };
    match req {
        NetRequest::None => Ok(Vec::new()),
        NetRequest::All => {
            if set.is_empty() {
                return Err(none_declared());
            }
            Ok(set)
        }
        NetRequest::Only(asked) => {
            if set.is_empty() {
                return Err(none_declared());
            }
            if asked.is_empty() || asked.iter().any(|a| a.trim().is_empty()) {
                return Err(Error::bad_args(
                    "--net= names no destination",
                    "give --net=HOST:PORT (one of the manifest's [exec] net), or --net for the whole set",
                ));
            }
            let mut out = Vec::new();
            for a in asked {
                let d = Dest::parse(a).map_err(|e| {
                    Error::bad_args(
                        format!("--net={a}: {e}"),
                        "give a destination as host:port, one the manifest's [exec] net declares",
                    )
                })?;
                if !set.iter().any(|s| d.within(s)) {
                    let declared: Vec<String> = set.iter().map(|s| s.to_string()).collect();
                    return Err(Error::bad_args(
                        format!(
                            "--net={a} is outside the manifest's declared set ({}); nothing ran",
                            declared.join(", ")
                        ),
                        "ask only for destinations the manifest's [exec] net declares (a human widens that set, not the agent)",
                    ));
                }
                if !out.contains(&d) {
                    out.push(d);
                }
            }
            Ok(out)
        }
    }
}

/// Why an address a declared name resolved to is refused (`None`: admitted): the IANA
/// special-purpose table of [`special`] (docs/security.md, "Which addresses a name may
/// resolve to"), e.g. `in 10.0.0.0/8 (private-use, RFC 1918): not globally reachable`.
pub fn non_public(ip: &IpAddr) -> Option<String> {
    special::refused(ip)
}

/// One connection an exec's proxy forwarded (the emission's `connections`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    pub dest: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// Bytes the command sent and received through it; `null` when unknown (an interrupted
    /// connection: nothing counted them to the end).
    pub bytes_up: Option<u64>,
    pub bytes_down: Option<u64>,
    /// Set after a crash or power cut: the connection was open, its byte counts are unknown
    /// (`null`), and the destination may have been reached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The outbound connection failed (nothing was forwarded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Connection {
    /// Whether it may have reached its destination: an outbound connect that failed did not
    /// (nothing was forwarded).
    pub fn reached(&self) -> bool {
        self.error.is_none()
    }
}

/// One refused attempt (the emission's or effect's `denied`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Denied {
    pub dest: String,
    pub port: u16,
    pub why: String,
}

/// What an exec's proxy did: every connection it forwarded and every attempt it refused, in
/// order.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct NetSummary {
    pub connections: Vec<Connection>,
    pub denied: Vec<Denied>,
}

impl NetSummary {
    /// Rebuilt from `net-connect`/`net-close` records (repair: an open connection is
    /// `interrupted`).
    pub fn from_records(recs: &[crate::wal::Record]) -> NetSummary {
        use crate::wal::Record;
        let mut s = NetSummary::default();
        let mut ids: Vec<u64> = Vec::new();
        for r in recs {
            match r {
                Record::NetConnect {
                    conn,
                    dest,
                    port,
                    resolved,
                    denied,
                    why,
                    ..
                } => {
                    if *denied {
                        s.denied.push(Denied {
                            dest: dest.clone(),
                            port: *port,
                            why: why.clone().unwrap_or_default(),
                        });
                    } else {
                        ids.push(*conn);
                        s.connections.push(Connection {
                            dest: dest.clone(),
                            port: *port,
                            resolved: resolved.clone(),
                            bytes_up: None,
                            bytes_down: None,
                            interrupted: true,
                            error: None,
                        });
                    }
                }
                Record::NetClose {
                    conn,
                    bytes_up,
                    bytes_down,
                    error,
                    ..
                } => {
                    if let Some(i) = ids.iter().position(|c| c == conn) {
                        let c = &mut s.connections[i];
                        c.bytes_up = Some(*bytes_up);
                        c.bytes_down = Some(*bytes_down);
                        c.interrupted = false;
                        c.error = error.clone();
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// Connections that may have reached their destination (an outbound connect that
    /// failed did not).
    pub fn reached(&self) -> impl Iterator<Item = &Connection> {
        self.connections.iter().filter(|c| c.reached())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_admit() {
        let d = Dest::parse("*.pythonhosted.org:443").unwrap();
        assert!(d.admits(&parse_host("files.pythonhosted.org").unwrap(), 443));
        assert!(d.admits(&parse_host("a.b.pythonhosted.org").unwrap(), 443));
        assert!(!d.admits(&parse_host("pythonhosted.org").unwrap(), 443));
        assert!(!d.admits(&parse_host("evilpythonhosted.org").unwrap(), 443));
        assert!(!d.admits(&parse_host("files.pythonhosted.org").unwrap(), 80));
        let ip = Dest::parse("127.0.0.1:8080").unwrap();
        assert!(ip.admits(&parse_host("127.0.0.1").unwrap(), 8080));
        assert!(!ip.admits(&parse_host("localhost").unwrap(), 8080));
        assert!(Dest::parse("[::1]:80").is_ok());
        assert!(Dest::parse("::1:80").is_err());
        assert!(Dest::parse("pypi.org").is_err());
        assert!(Dest::parse("pypi.org:0").is_err());
        assert!(Dest::parse("a*.b:1").is_err());
    }

    #[test]
    fn requested_parts() {
        let set = vec!["pypi.org:443".to_string(), "*.example.com:443".to_string()];
        assert_eq!(requested(&set, &NetRequest::All).unwrap().len(), 2);
        assert!(requested(&set, &NetRequest::Only(vec!["a.example.com:443".into()])).is_ok());
        assert!(requested(&set, &NetRequest::Only(vec!["*.x.example.com:443".into()])).is_ok());
        assert!(requested(&set, &NetRequest::Only(vec!["example.com:443".into()])).is_err());
        assert!(requested(&set, &NetRequest::Only(vec!["pypi.org:80".into()])).is_err());
        assert!(requested(&[], &NetRequest::All).is_err());
        assert!(requested(&[], &NetRequest::None).unwrap().is_empty());
    }

    #[test]
    fn classes() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "169.254.1.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(non_public(&a.parse().unwrap()).is_some(), "{a}");
        }
        for a in ["1.1.1.1", "151.101.0.223", "2a04:4e42::223"] {
            assert!(non_public(&a.parse().unwrap()).is_none(), "{a}");
        }
    }
}
