//! `revl._revl`: the native half of the Python package `revl` (docs/python.md).
//!
//! It converts and never decides: every verb is a `revl-core` call; results go back as the
//! JSON document the CLI prints for the same call (the Python layer wraps it in a typed
//! object), refusals as the core's typed [`Refusal`], errors as `revl.RevlError` subclasses
//! by code. Blocking work runs with the GIL released (`Python::detach`), so two threads on
//! two sessions run at once. A panic is caught and raised as a `RevlError`, never a crash.
//!
//! A `NativeSession` names a session by id and attaches for each call (taking the session
//! lock, repairing), as the MCP server does: `revl approve` from a terminal works while a
//! Python process holds the object. Between calls it keeps the session's state
//! ([`revl_core::session::Kept`]), so a call reads only what was appended to the WAL since
//! the last one (docs/architecture.md, "Incremental attach").
#![forbid(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use revl_core::api::{self, Answer};
use revl_core::session::{Kept, Repaired};
use revl_core::tools::{DeclaredTool, HostCall, ToolHost, ToolRun};
use revl_core::{
    Code, Error, ExecLimits, ExecOptions, FileOp, Remedy, Session, StepBackMode, Store,
};
use revl_fleet::{Catalog, RemoteCache};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The allocator of the `revl` binary (its scans make and free a few strings per witnessed
/// path; with the system's allocator a fork's enumeration spent about a quarter of its time
/// in malloc and free).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A verb's answer as Python receives it: the document (JSON text), and, if the verb
/// refused with its document, the refusal's code, message, hint and approval ticket (the
/// core words them; Python raises with those words).
type Doc = (
    String,
    Option<(&'static str, String, String, Option<String>)>,
);

fn answer<T: Answer>(r: &T, repaired: &[Repaired]) -> Doc {
    let doc = api::with_repairs(r.document(), repaired).to_string();
    let refusal = r.refusal().map(|f| {
        (
            f.code(),
            f.message(),
            f.hint(),
            f.ticket().map(str::to_string),
        )
    });
    (doc, refusal)
}

/// The core error as the `revl.RevlError` subclass of its code (built by `revl.errors`).
fn raise(py: Python<'_>, e: &Error) -> PyErr {
    let made = py.import("revl.errors").and_then(|m| {
        m.getattr("_from_native")?.call1((
            e.code.as_str(),
            &e.message,
            e.hint_with(py_remedy),
            e.step,
        ))
    });
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// A remedy in Python's words (the CLI words the same remedies as flags).
fn py_remedy(r: &Remedy) -> String {
    match r {
        Remedy::ListSessions => {
            "Store.sessions() lists them; Store(root) picks another store".into()
        }
        Remedy::Timeline => "Session.timeline() lists the steps".into(),
        Remedy::ListPath => "Session.list(path) shows what is there".into(),
        Remedy::Status => "Session.status()".into(),
        Remedy::NewSession => "Store.new(workspace)".into(),
        Remedy::PassArg(name) => format!("pass args={{\"{name}\": ...}}"),
        Remedy::ArgsObject => "pass args as a dict".into(),
        Remedy::GiveStore => "Store(root) or REVL_STORE".into(),
        Remedy::GiveManifest => "Store.new(workspace, manifest=FILE)".into(),
        Remedy::GiveWorkspace => "Store.new(workspace)".into(),
        Remedy::Unconfined => "Session.exec(argv, unconfined=True)".into(),
    }
}

fn internal(what: String) -> Error {
    Error::new(
        Code::Io,
        format!("internal error: {what}"),
        "this is a bug in revl; the WAL is intact; report it with the call you made",
    )
}

/// Run `f` without the GIL; a core error or a panic becomes a Python exception.
fn blocking<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    let out = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(raise(py, &e)),
        Err(p) => Err(raise(py, &Error::from_panic(&*p, "the call you made"))),
    }
}

/// Open the store at `root` as the CLI does (creating it if missing), with this process's
/// Python tools.
fn open(root: &std::path::Path, host: &Option<Arc<Host>>) -> Result<Store, Error> {
    let store = api::open_store(root, None)?;
    Ok(match host {
        Some(h) => store.with_tool_host(h.clone()),
        None => store,
    })
}

/// Where a read finds its sessions: the store at `root`, or the verified cache of its
/// remote `remote` (docs/fleet.md, "Reading a remote"), as the CLI's `--remote NAME`.
fn catalog(root: &std::path::Path, remote: Option<String>) -> Result<Box<dyn Catalog>, Error> {
    let store = open(root, &None)?;
    Ok(match remote {
        Some(name) => Box::new(RemoteCache::open(&store, &name)?),
        None => Box::new(store),
    })
}

// ---- Python functions as tools ----

/// The Python functions a process passed in `tools=`: tool name → (`module:qualname`,
/// function).
struct Host {
    tools: HashMap<String, (String, Py<PyAny>)>,
}

impl ToolHost for Host {
    fn holds(&self, tool: &str, target: &str) -> bool {
        self.tools.get(tool).is_some_and(|(t, _)| t == target)
    }

    fn accepts(&self, tool: &str, args: &Value) -> std::result::Result<(), String> {
        match self.tools.get(tool) {
            Some((_, f)) => Python::attach(|py| binds(py, f, args)),
            None => Ok(()),
        }
    }

    fn run(&self, call: HostCall<'_>) -> ToolRun {
        let Some((_, f)) = self.tools.get(&call.tool.name) else {
            return ToolRun::failed("missing-tool", format!("{} is not held", call.target));
        };
        Python::attach(|py| match call_python(py, f, &call) {
            Ok(witness) => ToolRun::ok(witness),
            Err(e) => {
                let ty = e
                    .get_type(py)
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "Exception".into());
                let msg = e.value(py).to_string();
                ToolRun::failed(
                    &ty,
                    format!("{} ({}) raised {ty}: {msg}", call.tool.name, call.target),
                )
            }
        })
    }
}

/// Whether `f`'s signature takes `args` (a JSON object) as keyword arguments:
/// `inspect.signature(f).bind(**args)`; its `TypeError` says why not.
fn binds(py: Python<'_>, f: &Py<PyAny>, args: &Value) -> std::result::Result<(), String> {
    let check = || -> PyResult<std::result::Result<(), String>> {
        let kwargs = PyDict::new(py);
        let parsed = py
            .import("json")?
            .getattr("loads")?
            .call1((args.to_string(),))?;
        kwargs.update(parsed.cast::<pyo3::types::PyMapping>()?)?;
        let sig = py
            .import("inspect")?
            .getattr("signature")?
            .call1((f.bind(py),))?;
        match sig.getattr("bind")?.call((), Some(&kwargs)) {
            Ok(_) => Ok(Ok(())),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {
                Ok(Err(e.value(py).to_string()))
            }
            Err(e) => Err(e),
        }
    };
    // A function whose signature cannot be read (a builtin) is not refused here.
    check().unwrap_or(Ok(()))
}

/// Call the function: a forward call with the call's args as keyword arguments, an inverse
/// with `args=` and `witness=`. Its return value, as JSON, is the witness (a value that is
/// not JSON is recorded as its `repr()`: the function did run).
fn call_python(py: Python<'_>, f: &Py<PyAny>, call: &HostCall<'_>) -> PyResult<Value> {
    let json = py.import("json")?;
    let loads = json.getattr("loads")?;
    let kwargs = PyDict::new(py);
    match call.witness {
        None => {
            let args = loads.call1((call.args.to_string(),))?;
            kwargs.update(args.cast::<pyo3::types::PyMapping>()?)?;
        }
        Some(w) => {
            kwargs.set_item("args", loads.call1((call.args.to_string(),))?)?;
            kwargs.set_item("witness", loads.call1((w.to_string(),))?)?;
        }
    }
    let ret = f.bind(py).call((), Some(&kwargs))?;
    // A coroutine (an `async def` slipped past `@revl.tool`) did not run: a failure, never a
    // witness (a held send would otherwise be recorded as sent).
    if py
        .import("inspect")?
        .getattr("isawaitable")?
        .call1((&ret,))?
        .is_truthy()?
    {
        if ret.hasattr("close")? {
            let _ = ret.call_method0("close");
        }
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "returned an awaitable: revl tools are plain functions (an async def never ran)",
        ));
    }
    let dump_kw = PyDict::new(py);
    dump_kw.set_item("allow_nan", false)?;
    let text: PyResult<String> = json
        .getattr("dumps")?
        .call((&ret,), Some(&dump_kw))
        .and_then(|t| t.extract());
    Ok(match text {
        Ok(t) => serde_json::from_str(&t).unwrap_or(Value::Null),
        Err(_) => Value::String(ret.repr().map(|r| r.to_string()).unwrap_or_default()),
    })
}

/// The tools a process holds, handed to every session it opens.
#[pyclass(frozen, module = "revl._revl")]
struct NativeHost {
    inner: Arc<Host>,
}

#[pymethods]
impl NativeHost {
    /// `tools`: tool name → (`module:qualname`, function).
    #[new]
    fn new(tools: HashMap<String, (String, Py<PyAny>)>) -> Self {
        NativeHost {
            inner: Arc::new(Host { tools }),
        }
    }
}

fn declared(spec: &Value) -> DeclaredTool {
    let s = |k: &str| spec.get(k).and_then(Value::as_str).map(str::to_string);
    DeclaredTool {
        name: s("name").unwrap_or_default(),
        class: s("class").unwrap_or_default(),
        scope: spec.get("scope").filter(|v| !v.is_null()).cloned(),
        python: s("python").unwrap_or_default(),
        undo: s("undo"),
        compensate: s("compensate"),
        approval: s("approval"),
        service: s("service"),
        method: s("method"),
        undo_idempotent: spec.get("undo_idempotent").and_then(Value::as_bool),
    }
}

// ---- the store ----

#[pyclass(frozen, module = "revl._revl")]
struct NativeStore {
    root: PathBuf,
}

#[pymethods]
impl NativeStore {
    /// The store at `path`, or the default (`$REVL_STORE`, …). Nothing is created until a
    /// verb needs it.
    #[new]
    #[pyo3(signature = (path=None))]
    fn new(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Self> {
        let root = match path {
            Some(p) => p,
            None => blocking(py, api::default_store_root)?,
        };
        // Absolute now: a later `os.chdir` (the program's or a tool's) must not move the
        // store, and two spellings of one store are one store.
        let root =
            std::path::absolute(&root).map_err(|e| raise(py, &Error::io(root.display(), e)))?;
        Ok(NativeStore { root })
    }

    #[getter]
    fn root(&self) -> String {
        self.root.display().to_string()
    }

    /// `new`: returns the `new` document (its `session` is the id).
    #[pyo3(signature = (workspace, manifest=None, tools_json="[]".to_string(), host=None))]
    fn new_session(
        &self,
        py: Python<'_>,
        workspace: PathBuf,
        manifest: Option<PathBuf>,
        tools_json: String,
        host: Option<Py<NativeHost>>,
    ) -> PyResult<Doc> {
        let host = host.map(|h| h.get().inner.clone());
        let root = self.root.clone();
        blocking(py, move || {
            let specs: Vec<Value> = serde_json::from_str(&tools_json)
                .map_err(|e| internal(format!("tool declarations: {e}")))?;
            let python: Vec<DeclaredTool> = specs.iter().map(declared).collect();
            let mut store = api::open_store(&root, Some(&workspace))?;
            if let Some(h) = host {
                store = store.with_tool_host(h);
            }
            let s = store.new_session_with(&workspace, manifest.as_deref(), &python)?;
            Ok(answer(&api::Created::of(&s), &[]))
        })
    }

    /// The full id of a session, from an id or a unique prefix.
    fn resolve(&self, py: Python<'_>, given: String) -> PyResult<String> {
        let root = self.root.clone();
        blocking(py, move || open(&root, &None)?.resolve(&given))
    }

    fn sessions(&self, py: Python<'_>) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            Ok(answer(&open(&root, &None)?.sessions()?, &[]))
        })
    }

    /// `log [SESSION]` of this store, or (`remote`) of that remote's verified cache, whose
    /// refused sessions are listed under `unreadable`.
    #[pyo3(signature = (session=None, remote=None))]
    fn log(
        &self,
        py: Python<'_>,
        session: Option<String>,
        remote: Option<String>,
    ) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            revl_fleet::reading(&*catalog(&root, remote)?, |c| {
                let listing = c.listing(session.as_deref())?;
                let report = revl_core::log::log(c.store(), listing.session.as_deref())?;
                let (doc, refusal) = answer(&report, &[]);
                if listing.unreadable.is_empty() {
                    return Ok((doc, refusal));
                }
                let mut v: Value =
                    serde_json::from_str(&doc).map_err(|e| internal(e.to_string()))?;
                v["unreadable"] = revl_core::report::to_json(&listing.unreadable);
                Ok((v.to_string(), refusal))
            })
        })
    }

    /// `compare LEFT RIGHT` of two sessions of this store (read from their WALs), or of a
    /// remote's verified cache.
    #[pyo3(signature = (left, right, remote=None))]
    fn compare(
        &self,
        py: Python<'_>,
        left: String,
        right: String,
        remote: Option<String>,
    ) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            revl_fleet::reading(&*catalog(&root, remote)?, |c| {
                let (l, r) = (c.session(&left)?, c.session(&right)?);
                let store = c.store();
                let report = revl_core::lineage::compare(&store.wal_path(&l), &store.wal_path(&r))?;
                Ok(answer(&report, &[]))
            })
        })
    }

    /// `read SESSION PATH --at K` of a session of this store or of a remote's verified cache
    /// (`remote`): the document (`{path, at, mode, digest, content | contentBase64}`).
    #[pyo3(signature = (session, path, at, remote=None))]
    fn read_at(
        &self,
        py: Python<'_>,
        session: String,
        path: String,
        at: i64,
        remote: Option<String>,
    ) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            revl_fleet::reading(&*catalog(&root, remote)?, |c| {
                let s = c.store().attach_read(&c.session(&session)?)?;
                Ok(answer(&s.read_at(&path, at)?, s.repairs()))
            })
        })
    }

    /// `timeline SESSION` of a session of this store or of a remote's verified cache.
    #[pyo3(signature = (session, remote=None))]
    fn timeline(&self, py: Python<'_>, session: String, remote: Option<String>) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            revl_fleet::reading(&*catalog(&root, remote)?, |c| {
                let s = c.store().attach_prefix(&c.session(&session)?)?;
                Ok(answer(&s.timeline(), s.repairs()))
            })
        })
    }

    /// The checkpoint records of every session that has any (docs/langgraph.md): for each,
    /// its document (`{session, state, parent?, frozenInto?, records}`) and the verified
    /// content of each record's blob still named (`None` for the others).
    #[allow(clippy::type_complexity)]
    fn checkpoint_sessions<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(String, Vec<Option<Bound<'py, PyBytes>>>)>> {
        let root = self.root.clone();
        let found = blocking(py, move || open(&root, &None)?.saved_sessions())?;
        Ok(found
            .into_iter()
            .map(|s| {
                let doc = serde_json::to_string(&s).unwrap_or_default();
                let contents = s
                    .contents
                    .iter()
                    .map(|c| c.as_deref().map(|b| PyBytes::new(py, b)))
                    .collect();
                (doc, contents)
            })
            .collect())
    }

    /// `diff LEFT RIGHT [PATH]`: each side a session id, optionally `ID@K`; of this store
    /// or of a remote's verified cache (`remote`).
    #[pyo3(signature = (left, right, path=None, remote=None))]
    fn diff(
        &self,
        py: Python<'_>,
        left: String,
        right: String,
        path: Option<String>,
        remote: Option<String>,
    ) -> PyResult<Doc> {
        let root = self.root.clone();
        blocking(py, move || {
            revl_fleet::reading(&*catalog(&root, remote)?, |c| {
                let (l, r) = (c.point(&left)?, c.point(&right)?);
                let report = revl_core::session::diff::diff_in(c.store(), &l, &r, path.as_deref())?;
                Ok(answer(&report, &[]))
            })
        })
    }
}

// ---- a session ----

#[pyclass(frozen, module = "revl._revl")]
struct NativeSession {
    root: PathBuf,
    id: String,
    host: Option<Arc<Host>>,
    /// The state the last call left, for the next call's attach. Taken for the length of a
    /// call: a second thread calling meanwhile reads the whole WAL.
    kept: std::sync::Mutex<Option<Kept>>,
}

/// How a verb attaches: to write (lock, repair), to read (never waits for a lock), or to
/// show (`status`, `timeline`: as the CLI does, a WAL corrupt past its header shows its
/// intact prefix with `corrupt` instead of raising).
#[derive(Clone, Copy)]
enum How {
    Write,
    Read,
    Show,
}

impl NativeSession {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        how: How,
        f: impl FnOnce(&mut Session) -> Result<T, Error> + Send,
    ) -> PyResult<(T, Vec<Repaired>)> {
        blocking(py, || {
            let store = open(&self.root, &self.host)?;
            let kept = self.kept.lock().ok().and_then(|mut k| k.take());
            let mut s = match how {
                How::Write => store.attach_kept(&self.id, kept)?,
                How::Read => store.attach_read_kept(&self.id, kept)?,
                How::Show => store.attach_prefix_kept(&self.id, kept)?,
            };
            let out = f(&mut s)?;
            let repaired = s.repairs().to_vec();
            // The lock is released (the session kept) before the result goes out; a call
            // that failed keeps nothing (the next one reads the whole WAL).
            let kept = s.keep();
            if let Ok(mut k) = self.kept.lock() {
                *k = kept;
            }
            Ok((out, repaired))
        })
    }

    fn verb<T: Answer + Send>(
        &self,
        py: Python<'_>,
        how: How,
        f: impl FnOnce(&mut Session) -> Result<T, Error> + Send,
    ) -> PyResult<Doc> {
        let (r, repaired) = self.with(py, how, f)?;
        Ok(answer(&r, &repaired))
    }

    fn effect(&self, py: Python<'_>, op: FileOp) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.file_effect(op))
    }
}

#[pymethods]
impl NativeSession {
    #[new]
    #[pyo3(signature = (store, id, host=None))]
    fn new(store: &NativeStore, id: String, host: Option<Py<NativeHost>>) -> Self {
        NativeSession {
            root: store.root.clone(),
            id,
            host: host.map(|h| h.get().inner.clone()),
            kept: std::sync::Mutex::new(None),
        }
    }

    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    fn write(&self, py: Python<'_>, path: String, content: Vec<u8>) -> PyResult<Doc> {
        self.effect(py, FileOp::Write { path, content })
    }

    fn delete(&self, py: Python<'_>, path: String) -> PyResult<Doc> {
        self.effect(py, FileOp::Delete { path })
    }

    fn rename(&self, py: Python<'_>, src: String, dst: String) -> PyResult<Doc> {
        self.effect(py, FileOp::Rename { from: src, to: dst })
    }

    fn mkdir(&self, py: Python<'_>, path: String) -> PyResult<Doc> {
        self.effect(py, FileOp::Mkdir { path })
    }

    /// `mode`: the CLI's octal string (`"644"`, `"0o644"`).
    fn chmod(&self, py: Python<'_>, path: String, mode: String) -> PyResult<Doc> {
        let mode = blocking(py, || revl_core::workspace::parse_mode(&mode))?;
        self.effect(py, FileOp::Chmod { path, mode })
    }

    /// The file's bytes now, or right after step `at`.
    #[pyo3(signature = (path, at=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: String,
        at: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (bytes, _) = self.with(py, How::Read, move |s| {
            let (content, b64) = match at {
                Some(k) => {
                    let r = s.read_at(&path, k)?;
                    (r.content, r.content_base64)
                }
                None => {
                    let r = s.workspace().read(&path)?;
                    (r.content, r.content_base64)
                }
            };
            match (content, b64) {
                (Some(c), _) => Ok(c.into_bytes()),
                (None, Some(b)) => revl_core::workspace::unb64(&b),
                (None, None) => Ok(Vec::new()),
            }
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The document of `read` (`{path, mode, content | contentBase64}`, with `at`).
    #[pyo3(signature = (path, at=None))]
    fn read_doc(&self, py: Python<'_>, path: String, at: Option<i64>) -> PyResult<Doc> {
        match at {
            Some(k) => self.verb(py, How::Read, move |s| s.read_at(&path, k)),
            None => self.verb(py, How::Read, move |s| s.workspace().read(&path)),
        }
    }

    #[pyo3(signature = (path=None))]
    fn list(&self, py: Python<'_>, path: Option<String>) -> PyResult<Doc> {
        self.verb(py, How::Read, move |s| s.workspace().list(path.as_deref()))
    }

    fn provide(&self, py: Python<'_>, key: String, value: String) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.provide(&key, &value))
    }

    #[pyo3(signature = (label=None))]
    fn boundary(&self, py: Python<'_>, label: Option<String>) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.boundary(label.as_deref()))
    }

    /// `args_json`: the call's args as a JSON object.
    fn call(&self, py: Python<'_>, tool: String, args_json: String) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            let args: Value = serde_json::from_str(&args_json).map_err(|e| {
                Error::bad_args(
                    format!("args are not JSON: {e}"),
                    "give args as a dict of JSON values",
                )
            })?;
            s.call(&tool, args)
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (argv, timeout=None, cwd=None, unconfined=false, memory=None, pids=None, cpu_seconds=None, max_bytes=None, net=None))]
    fn exec(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        timeout: Option<f64>,
        cwd: Option<String>,
        unconfined: bool,
        memory: Option<String>,
        pids: Option<u64>,
        cpu_seconds: Option<u64>,
        max_bytes: Option<String>,
        net: Option<Vec<String>>,
    ) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            // `net=True` arrives as [] (the whole declared set), a list as its destinations.
            let net = match net {
                None => revl_core::egress::NetRequest::None,
                Some(v) if v.is_empty() => revl_core::egress::NetRequest::All,
                Some(v) => revl_core::egress::NetRequest::Only(v),
            };
            let limits =
                ExecLimits::parse(memory.as_deref(), pids, cpu_seconds, max_bytes.as_deref())?;
            s.exec_with(&ExecOptions {
                argv,
                timeout: ExecOptions::timeout_secs(timeout)?,
                cwd,
                unconfined,
                output: None,
                limits,
                net,
                ..ExecOptions::default()
            })
        })
    }

    fn timeline(&self, py: Python<'_>) -> PyResult<Doc> {
        self.verb(py, How::Show, |s| Ok(s.timeline()))
    }

    fn inspect(&self, py: Python<'_>, at: i64) -> PyResult<Doc> {
        self.verb(py, How::Read, move |s| s.inspect(at))
    }

    /// `status`; the held sends whose seq is in `known` carry `args: null`: the caller holds
    /// their arguments already (a held send's arguments never change), so a large one is
    /// not serialised and parsed again on every call (docs/python.md, "A held send from a
    /// Python function, committed").
    #[pyo3(signature = (known=Vec::new()))]
    fn status(&self, py: Python<'_>, known: Vec<u64>) -> PyResult<Doc> {
        let known: std::collections::HashSet<u64> = known.into_iter().collect();
        self.verb(py, How::Show, move |s| {
            let mut st = s.status();
            for d in st.queue.iter_mut().filter(|d| known.contains(&d.seq)) {
                d.args = std::sync::Arc::new(serde_json::Value::Null);
            }
            Ok(st)
        })
    }

    fn verify(&self, py: Python<'_>) -> PyResult<Doc> {
        self.verb(py, How::Read, |s| s.verify())
    }

    /// `mode`: `"scoped"` or `"compensating"` (with `force`).
    #[pyo3(signature = (to, mode="scoped".to_string(), force=false, keep_drift=false))]
    fn step_back(
        &self,
        py: Python<'_>,
        to: i64,
        mode: String,
        force: bool,
        keep_drift: bool,
    ) -> PyResult<Doc> {
        let mode = match (mode.as_str(), force) {
            ("scoped", false) => StepBackMode::Scoped,
            ("compensating", force) => StepBackMode::Compensating { force },
            ("scoped", true) => {
                return Err(raise(
                    py,
                    &Error::bad_args(
                        "force applies to a compensating step-back only",
                        "pass mode=\"compensating\" with force=True",
                    ),
                ))
            }
            (other, _) => {
                return Err(raise(
                    py,
                    &Error::bad_args(
                        format!("step_back mode {other:?} is not \"scoped\" or \"compensating\""),
                        "pass mode=\"scoped\" (the default) or mode=\"compensating\"",
                    ),
                ))
            }
        };
        let drift = revl_core::DriftPolicy::keeping(keep_drift);
        self.verb(py, How::Write, move |s| s.step_back_with(to, mode, drift))
    }

    fn fork(&self, py: Python<'_>, at: i64) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.fork(at))
    }

    #[pyo3(signature = (hash, into=None, keep_drift=false))]
    fn fork_confirm(
        &self,
        py: Python<'_>,
        hash: String,
        into: Option<PathBuf>,
        keep_drift: bool,
    ) -> PyResult<Doc> {
        let drift = revl_core::DriftPolicy::keeping(keep_drift);
        self.verb(py, How::Write, move |s| {
            s.fork_confirm_with(&hash, into.as_deref(), drift)
        })
    }

    /// `fork` and `fork_confirm(into=…)` in one call, the workspace scanned once
    /// (`RevlSaver.branch`): with `require_clean`, an enumeration whose residue is not clean
    /// comes back unconfirmed (no branch), the fork pending.
    fn fork_branch(
        &self,
        py: Python<'_>,
        at: i64,
        into: PathBuf,
        require_clean: bool,
    ) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            s.fork_branch(at, &into, require_clean)
        })
    }

    fn commit(&self, py: Python<'_>) -> PyResult<Doc> {
        self.verb(py, How::Write, |s| s.commit())
    }

    fn commit_confirm(&self, py: Python<'_>, hash: String) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.commit_confirm(&hash))
    }

    /// `resend --seq S`: fire one owed or failed held send of a committed session once more.
    /// A Python tool's send can be retried only from a process that has its function.
    fn resend(&self, py: Python<'_>, seq: u64) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.resend(seq))
    }

    /// `abort`; with `remove`, a parallel branch's workspace is taken down and removed too
    /// (`revl abort --remove`, docs/reference.md, "Serial and parallel branches"): refused
    /// before anything is aborted for a session whose workspace a parallel fork did not make.
    #[pyo3(signature = (remove=false))]
    fn abort(&self, py: Python<'_>, remove: bool) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| match remove {
            true => s.abort_and_remove(),
            false => s.abort(),
        })
    }

    /// Bind a checkpoint id to position `at` (default: the head) (a `bind` record,
    /// docs/langgraph.md).
    #[pyo3(signature = (label, at=None))]
    fn bind(&self, py: Python<'_>, label: String, at: Option<u64>) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.bind(&label, at))
    }

    /// Keep a front end's checkpoint: `content` as a blob, then a `checkpoint` record
    /// (bound to `at`, default the head, when `bind`) (docs/langgraph.md).
    #[pyo3(signature = (thread, ns, id, parent, content, bind, at=None, uses=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn checkpoint_put(
        &self,
        py: Python<'_>,
        thread: String,
        ns: String,
        id: String,
        parent: Option<String>,
        content: Vec<u8>,
        bind: bool,
        at: Option<u64>,
        uses: Vec<String>,
    ) -> PyResult<Doc> {
        let key = revl_core::session::CheckpointKey {
            thread,
            ns,
            id,
            parent,
            uses,
        };
        self.verb(py, How::Write, move |s| {
            s.save_checkpoint(key, &content, bind, at)
        })
    }

    /// Keep pending writes of a checkpoint (`content` as a blob, a `checkpoint-writes` record).
    fn checkpoint_writes(
        &self,
        py: Python<'_>,
        thread: String,
        ns: String,
        checkpoint: String,
        content: Vec<u8>,
    ) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            s.save_checkpoint_writes(&thread, &ns, &checkpoint, &content)
        })
    }

    /// Forget checkpoints (a `checkpoint-forget` record): `ids` of `ns`, or the whole thread.
    #[pyo3(signature = (thread, ns=None, ids=Vec::new()))]
    fn checkpoint_forget(
        &self,
        py: Python<'_>,
        thread: String,
        ns: Option<String>,
        ids: Vec<String>,
    ) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            s.forget_checkpoints(&thread, ns.as_deref(), ids)
        })
    }

    /// The thread now stands at checkpoint `id` (a `checkpoint-tip` record).
    fn checkpoint_tip(&self, py: Python<'_>, thread: String, id: String) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.checkpoint_tip(&thread, &id))
    }

    /// `fork --at K` enumerated without recording anything (the report and its hash).
    fn fork_preview(&self, py: Python<'_>, at: i64) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| s.fork_preview(at))
    }

    /// The session's life, head and bound checkpoints.
    fn position(&self, py: Python<'_>) -> PyResult<Doc> {
        self.verb(py, How::Read, |s| Ok(s.position()))
    }

    /// `fields_json`: the note's fields as the CLI names them (`step`, `model`, `tokensIn`, …).
    fn note_model(&self, py: Python<'_>, fields_json: String) -> PyResult<Doc> {
        self.verb(py, How::Write, move |s| {
            let args: Value = serde_json::from_str(&fields_json)
                .map_err(|e| internal(format!("note_model fields: {e}")))?;
            s.note_model(&args)
        })
    }
}

/// The `revl` command line (the same as the Rust binary's), run in this process; returns
/// its exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    py.detach(move || revl::main_with(argv))
}

#[pymodule]
fn _revl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeStore>()?;
    m.add_class::<NativeSession>()?;
    m.add_class::<NativeHost>()?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("WAL_VERSION", revl_core::wal::WAL_VERSION)?;
    Ok(())
}
