//! What the operator fixes when starting `revl mcp`, and the checks that keep the agent's
//! calls inside it (docs/mcp.md, "Who decides what"; docs/security.md, "The MCP server:
//! operator and agent").
//!
//! The operator (whoever starts the server) decides the manifest (the tools, their inverses,
//! the `[exec]` egress and hides), whether a command may run unconfined on the host, and the
//! directories new workspaces and parallel branches may be made in. The agent (the client's
//! tool calls) names none of these: a call that asks for more is refused with `not-allowed`
//! before anything runs or is recorded.

use revl_core::session::ManifestSource;
use revl_core::{Code, Error, Store};
use std::path::{Component, Path, PathBuf};

/// The operator's choices from the command line, as given.
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    /// `--allow-unconfined`: `revl_exec {unconfined: true}` may run a command on the host.
    pub allow_unconfined: bool,
    /// `--root DIR` (repeatable): the directories `revl_new {workspace}` and
    /// `revl_fork_confirm {into}` may use. None: both are refused.
    pub roots: Vec<PathBuf>,
}

/// The manifest the server serves with: the only manifest its sessions may have.
#[derive(Debug, Clone)]
pub(crate) struct ServerManifest {
    /// The stored copy's digest (`None`: no manifest, no tools).
    pub digest: Option<String>,
    /// Its text, fixed at start: `revl_new` gives new sessions exactly these bytes.
    pub text: Option<String>,
    /// Where it came from, for messages: `--manifest FILE`, or the served session's own.
    pub origin: String,
}

/// The bounds as the server enforces them: roots canonical, the manifest fixed.
#[derive(Debug, Clone)]
pub(crate) struct Authority {
    pub allow_unconfined: bool,
    pub roots: Vec<PathBuf>,
    pub manifest: ServerManifest,
}

/// A refusal of what the operator did not allow: nothing ran, nothing was recorded.
pub(crate) fn not_allowed(message: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::new(Code::NotAllowed, message, hint)
}

/// The manifest digest recorded in session `id`'s WAL header, read without a lock and
/// without repairing anything (the first call's attach repairs, and reports it).
pub(crate) fn manifest_of(store: &Store, id: &str) -> Result<Option<String>, Error> {
    Ok(store.info(id)?.manifest_digest)
}

fn short(digest: &Option<String>) -> String {
    match digest {
        Some(d) => format!("manifest {}", &d[..d.len().min(12)]),
        None => "no manifest".into(),
    }
}

impl Authority {
    /// Canonicalise the roots (each must be an existing directory) and read the operator's
    /// `--manifest` once, into the store: later changes to that file, by anyone, change
    /// nothing for this server.
    fn new(store: &Store, bounds: &Bounds, manifest: Option<&Path>) -> Result<Authority, Error> {
        let mut roots = Vec::new();
        for r in &bounds.roots {
            let c = std::fs::canonicalize(r)
                .ok()
                .filter(|c| c.is_dir())
                .ok_or_else(|| {
                    Error::new(
                        Code::Usage,
                        format!("--root {}: not an existing directory", r.display()),
                        "give --root an existing directory (new workspaces and `into` directories are made below it)",
                    )
                })?;
            if !roots.contains(&c) {
                roots.push(c);
            }
        }
        let manifest = match manifest {
            Some(path) => {
                let digest = store.import_manifest_from(
                    ManifestSource::FileOrWorkspace(Some(path)),
                    path,
                    &[],
                )?;
                let text = digest
                    .as_deref()
                    .map(|d| store.manifest_text(d))
                    .transpose()?;
                ServerManifest {
                    digest,
                    text,
                    origin: format!("--manifest {}", path.display()),
                }
            }
            None => ServerManifest {
                digest: None,
                text: None,
                origin: "no --manifest".into(),
            },
        };
        Ok(Authority {
            allow_unconfined: bounds.allow_unconfined,
            roots,
            manifest,
        })
    }

    /// Without `--manifest`, the server's manifest is the served session's own (read from
    /// its WAL header): the operator named that session, and so what it was created with.
    fn adopt(&mut self, store: &Store, id: &str) -> Result<(), Error> {
        let digest = manifest_of(store, id)?;
        let text = digest
            .as_deref()
            .map(|d| store.manifest_text(d))
            .transpose()?;
        self.manifest = ServerManifest {
            origin: format!("session {id}'s own ({})", short(&digest)),
            digest,
            text,
        };
        Ok(())
    }

    /// Refuse to serve session `id` unless its manifest is the server's.
    pub fn admit(&self, store: &Store, id: &str) -> Result<(), Error> {
        let digest = manifest_of(store, id)?;
        self.admit_digest(id, &digest)
    }

    /// [`Authority::admit`] for a session whose digest the caller holds.
    pub fn admit_digest(&self, id: &str, digest: &Option<String>) -> Result<(), Error> {
        if *digest == self.manifest.digest {
            return Ok(());
        }
        Err(not_allowed(
            format!(
                "session {id} has {}, not this server's manifest ({}, {}): revl mcp serves only sessions with the manifest it was started with",
                short(digest),
                self.manifest.origin,
                short(&self.manifest.digest)
            ),
            format!("start a server for that session with its own manifest: `revl mcp --session {id}` (the operator's choice)"),
        ))
    }

    /// `revl_new {workspace}` or `revl_fork_confirm {into}`: the path as it will be made
    /// (absolute, symlinks of its existing part resolved), when it is one of the roots or
    /// below one; `not-allowed` otherwise, and always when the server has no root.
    pub fn inside_roots(&self, given: &str, what: &str) -> Result<PathBuf, Error> {
        if self.roots.is_empty() {
            return Err(not_allowed(
                format!("{what} {given:?}: this server was started without --root, so it makes no new directory for a session"),
                "work in the current session; the operator allows new workspaces and parallel branches by starting revl mcp with --root DIR (repeatable)",
            ));
        }
        let p = revl_core::store::resolve_future(Path::new(given))?;
        let inside = !p.components().any(|c| c == Component::ParentDir)
            && self.roots.iter().any(|r| p.starts_with(r));
        if inside {
            return Ok(p);
        }
        let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
        Err(not_allowed(
            format!(
                "{what} {} is outside the directories this server may use ({})",
                p.display(),
                roots.join(", ")
            ),
            "give a path below one of them; only the operator can add one (revl mcp --root DIR)",
        ))
    }

    /// What the agent is told about its bounds (the instructions and the startup notice).
    pub fn describe(&self) -> String {
        let roots = if self.roots.is_empty() {
            "none (revl_new and revl_fork_confirm {into} are refused)".to_string()
        } else {
            self.roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "manifest: {} ({}); unconfined exec: {}; directories for revl_new and into: {roots}",
            self.manifest.origin,
            short(&self.manifest.digest),
            if self.allow_unconfined {
                "allowed (--allow-unconfined)"
            } else {
                "refused"
            }
        )
    }
}

/// Which session the server serves, decided once at startup.
#[derive(Debug, Clone)]
pub enum Target {
    /// An existing session: its 32-hex id or a unique prefix of at least 6 characters.
    Session(String),
    /// The live session of this workspace; if it has none, a new session is created there
    /// with the server's manifest (never the workspace's own `revl.toml`).
    Workspace(PathBuf),
}

/// Everything `revl mcp` is started with.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    /// `--manifest FILE`: the server's manifest. Without it: the served session's own, and
    /// none for a session the server creates.
    pub manifest: Option<PathBuf>,
    pub bounds: Bounds,
}

/// Resolve the target and fix the server's authority: the session to serve, a notice for
/// stderr when one was created, and the bounds. A session whose manifest differs from
/// `--manifest` is refused (`not-allowed`) before serving.
pub(crate) fn fix(
    store: &Store,
    config: &Config,
) -> Result<(String, Option<String>, Authority), Error> {
    let mut auth = Authority::new(store, &config.bounds, config.manifest.as_deref())?;
    let existing = match &config.target {
        Target::Session(given) => Some(store.resolve(given)?),
        Target::Workspace(dir) => store.live_session_of(dir)?,
    };
    if let Some(id) = existing {
        if config.manifest.is_some() {
            auth.admit(store, &id)?;
        } else {
            auth.adopt(store, &id)?;
        }
        return Ok((id, None, auth));
    }
    let Target::Workspace(dir) = &config.target else {
        unreachable!("a session target resolves or fails")
    };
    let s = store.new_session_from(
        dir,
        ManifestSource::Fixed(auth.manifest.text.as_deref()),
        &[],
    )?;
    let id = s.id().to_string();
    auth.admit_digest(&id, &s.state().manifest_digest)?;
    drop(s);
    let notice = format!("revl mcp: created session {id} on {}", dir.display());
    Ok((id, Some(notice), auth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(roots: Vec<PathBuf>) -> Authority {
        Authority {
            allow_unconfined: false,
            roots,
            manifest: ServerManifest {
                digest: None,
                text: None,
                origin: "no --manifest".into(),
            },
        }
    }

    #[test]
    fn no_root_refuses_every_path_and_names_the_flag() {
        let e = auth(vec![])
            .inside_roots("/tmp/x", "workspace")
            .unwrap_err();
        assert_eq!(e.code, Code::NotAllowed);
        assert!(
            e.message.contains("--root") || e.hint.contains("--root"),
            "{e:?}"
        );
    }

    #[test]
    fn a_path_is_inside_only_below_a_canonical_root_after_its_links_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("root");
        let out = root.parent().unwrap().join("elsewhere");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(&out, root.join("link")).unwrap();
        let a = auth(vec![root.clone()]);
        let ok = |p: PathBuf| a.inside_roots(p.to_str().unwrap(), "workspace");
        assert_eq!(
            ok(root.join("new/deeper")).unwrap(),
            root.join("new/deeper")
        );
        assert_eq!(ok(root.clone()).unwrap(), root);
        for bad in [
            out.join("x"),
            root.join("link/x"),
            root.join("../elsewhere/x"),
            root.join("new/../../elsewhere"),
            PathBuf::from("/etc"),
            root.parent().unwrap().join("rootsibling"),
        ] {
            let e = ok(bad.clone()).unwrap_err();
            assert!(
                matches!(e.code, Code::NotAllowed | Code::BadArgs),
                "{} is not inside: {e:?}",
                bad.display()
            );
        }
    }
}
