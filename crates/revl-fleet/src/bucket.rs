//! Where a remote's objects live: an S3-compatible bucket (through `object_store`'s AWS
//! client, path-style, credentials from the usual `AWS_*` variables) or a shared directory
//! (`file://DIR`). Both give the three operations the fencing needs: create-if-absent,
//! replace-if-unchanged (compare-and-swap on a version), and reads that return the version.

use crate::untrusted::{check_key, refused, MAX_OBJECT};
use object_store::{aws::AmazonS3Builder, ObjectStore, PutMode, PutOptions, UpdateVersion};
use revl_core::{Code, Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An object's version, as the compare-and-swap checks it (an S3 ETag; a shared
/// directory's content digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(pub String);

/// What a conditional write found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Written.
    Done,
    /// Create: the object exists. Update: the object changed (or vanished) since it was read.
    Conflict,
}

/// The bucket of a remote.
pub enum Bucket {
    /// An object store: S3 (`s3://`), or any other `object_store` implementation given to
    /// [`Bucket::over`] (the tests' in-memory store).
    S3 {
        store: Arc<dyn ObjectStore>,
        prefix: String,
        rt: tokio::runtime::Runtime,
        url: String,
    },
    Dir {
        root: PathBuf,
    },
}

/// An error of the object store, as a user can act on it: a bucket that does not exist and
/// missing credentials are said as such (never as "object not found" or the cloud's
/// instance-metadata address); anything else names what failed and the server's answer.
fn remote_err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    let e = e.to_string();
    if let Some(b) = no_such_bucket(&e) {
        return Error::new(
            Code::Io,
            format!("{what}: the bucket {b} does not exist on the server"),
            "create the bucket, or fix the remote's URL (`revl remote list` shows it; `revl remote add NAME s3://BUCKET/PREFIX`)",
        );
    }
    if e.contains("169.254.169.254") || e.contains("credential") {
        return no_credentials(&what.to_string());
    }
    Error::new(
        Code::Io,
        format!("{what}: {e}"),
        "check the remote's URL, that its server is reachable, and the AWS_* credentials (`revl remote list` shows the URL)",
    )
}

/// The bucket named by an S3 `NoSuchBucket` answer in `e`, if it is one.
fn no_such_bucket(e: &str) -> Option<String> {
    if !e.contains("NoSuchBucket") {
        return None;
    }
    let name = e
        .split_once("<BucketName>")
        .and_then(|(_, r)| r.split_once("</BucketName>"))
        .map(|(b, _)| b.to_string())
        .unwrap_or_else(|| "named by the URL".to_string());
    Some(name)
}

fn no_credentials(what: &str) -> Error {
    Error::new(
        Code::Usage,
        format!("{what}: no AWS credentials are set"),
        "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN",
    )
}

/// Whether the environment holds credentials object_store reads without asking the
/// cloud's instance-metadata service (which, off a cloud machine, answers nothing useful).
fn credentials_in_env() -> bool {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
}

impl Bucket {
    /// Check `url` is a remote URL (`s3://bucket[/prefix]` or `file:///abs/dir`) without
    /// opening it (nor needing credentials).
    pub fn check_url(url: &str) -> Result<()> {
        if let Some(rest) = url.strip_prefix("s3://") {
            let bucket = rest.split('/').next().unwrap_or_default();
            if bucket.is_empty() {
                return Err(bad_url(url));
            }
            return Ok(());
        }
        match url.strip_prefix("file://") {
            Some(dir) if Path::new(dir).is_absolute() => Ok(()),
            _ => Err(bad_url(url)),
        }
    }

    /// A bucket over any object store (`url` names it in messages): the same code as an S3
    /// remote's, e.g. on `object_store`'s in-memory store in tests.
    pub fn over(store: Arc<dyn ObjectStore>, url: &str) -> Result<Bucket> {
        Ok(Bucket::S3 {
            store,
            prefix: String::new(),
            rt: runtime()?,
            url: url.to_string(),
        })
    }

    /// Open the bucket of `url` (`s3://bucket[/prefix]` or `file:///abs/dir`).
    pub fn open(url: &str) -> Result<Bucket> {
        Self::check_url(url)?;
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if !credentials_in_env() {
                return Err(no_credentials(&format!("cannot open {url}")));
            }
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_virtual_hosted_style_request(false)
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .with_retry(object_store::RetryConfig {
                    max_retries: 2,
                    retry_timeout: std::time::Duration::from_secs(15),
                    ..Default::default()
                });
            if let Ok(ep) = std::env::var("AWS_ENDPOINT_URL") {
                if ep.starts_with("http://") {
                    b = b.with_allow_http(true);
                }
                b = b.with_endpoint(ep);
            }
            if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err()
            {
                b = b.with_region("us-east-1");
            }
            let store = b
                .build()
                .map_err(|e| remote_err(format!("cannot open {url}"), e))?;
            return Ok(Bucket::S3 {
                store: Arc::new(store),
                prefix: prefix.trim_matches('/').to_string(),
                rt: runtime()?,
                url: url.to_string(),
            });
        }
        let dir = url.strip_prefix("file://").ok_or_else(|| bad_url(url))?;
        Ok(Bucket::Dir {
            root: PathBuf::from(dir),
        })
    }

    fn key(prefix: &str, key: &str) -> object_store::path::Path {
        if prefix.is_empty() {
            object_store::path::Path::from(key)
        } else {
            object_store::path::Path::from(format!("{prefix}/{key}"))
        }
    }

    /// Read an object: its bytes and version, `None` when absent (at most one object's
    /// bytes, [`MAX_OBJECT`]).
    pub fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>> {
        self.get_limited(key, MAX_OBJECT)
    }

    /// Read an object of at most `max` bytes (a larger one is refused, `corrupt-remote`,
    /// before its bytes are read): its bytes and version, `None` when absent. The key must
    /// name an object inside the remote; in a shared directory, a regular file reached
    /// without following a symlink.
    pub fn get_limited(&self, key: &str, max: u64) -> Result<Option<(Vec<u8>, Version)>> {
        self.check(key)?;
        match self {
            Bucket::S3 {
                store,
                prefix,
                rt,
                url,
            } => rt.block_on(s3_get(store.clone(), Self::key(prefix, key), max, url)),
            Bucket::Dir { root } => dir_get(root, key, max, &self.describe()),
        }
    }

    fn check(&self, key: &str) -> Result<()> {
        check_key(key).map_err(|rule| refused(&self.describe(), key, &rule))
    }

    /// Whether an object exists.
    pub fn exists(&self, key: &str) -> Result<bool> {
        self.check(key)?;
        match self {
            Bucket::S3 {
                store, prefix, rt, ..
            } => rt.block_on(s3_exists(store.clone(), Self::key(prefix, key))),
            Bucket::Dir { root } => Ok(std::fs::symlink_metadata(root.join(key)).is_ok()),
        }
    }

    /// Write an object. `expect`: `None` = create only if absent; `Some(v)` = replace only
    /// if its version is still `v`.
    pub fn put(&self, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put> {
        match self {
            Bucket::S3 {
                store, prefix, rt, ..
            } => rt.block_on(s3_put(
                store.clone(),
                Self::key(prefix, key),
                bytes.to_vec(),
                expect.cloned(),
            )),
            Bucket::Dir { root } => dir_put(root, key, bytes, expect),
        }
    }

    /// Replace an object whatever it holds (or create it): only for content-addressed
    /// objects (a blob, a segment, a pack), whose right bytes are the only ones their name
    /// allows, when the bucket's copy fails verification (`push --repair`).
    pub fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.check(key)?;
        match self {
            Bucket::S3 {
                store, prefix, rt, ..
            } => {
                let p = Self::key(prefix, key);
                rt.block_on(store.put(&p, bytes.to_vec().into()))
                    .map_err(|e| remote_err(format!("cannot write {p}"), e))?;
                Ok(())
            }
            Bucket::Dir { root } => {
                let path = root.join(key);
                let io = |e: std::io::Error| Error::io(path.display(), e);
                if let Some(d) = path.parent() {
                    std::fs::create_dir_all(d).map_err(io)?;
                }
                // A symlink planted at the key is replaced, never written through.
                if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
                    std::fs::remove_file(&path).map_err(io)?;
                }
                revl_core::util::write_durable(&path, bytes).map_err(io)
            }
        }
    }

    /// Run `op` on each key's object path (up to 32 requests in flight), results in order;
    /// the first error wins. `None` for a shared directory (the caller goes one by one).
    fn fan_out<'a, K, T, F, Fut>(
        &self,
        items: &'a [K],
        key: impl Fn(&'a K) -> &'a str,
        op: F,
    ) -> Option<Result<Vec<T>>>
    where
        F: Fn(Arc<dyn ObjectStore>, object_store::path::Path, &'a K) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        use futures::StreamExt;
        let Bucket::S3 {
            store, prefix, rt, ..
        } = self
        else {
            return None;
        };
        Some(rt.block_on(async {
            let futs = items
                .iter()
                .map(|item| op(store.clone(), Self::key(prefix, key(item)), item));
            futures::stream::iter(futs)
                .buffered(32)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect()
        }))
    }

    /// Read many objects of at most `max` bytes each at once (up to 32 requests in
    /// flight); `None` where absent. The first refusal or error wins.
    pub fn get_many(&self, keys: &[String], max: u64) -> Result<Vec<Option<Vec<u8>>>> {
        self.get_each(keys, max).into_iter().collect()
    }

    /// [`Bucket::get_many`], each object's answer on its own: one refused object does not
    /// hide the others.
    pub fn get_each(&self, keys: &[String], max: u64) -> Vec<Result<Option<Vec<u8>>>> {
        let keys: Vec<(String, u64)> = keys.iter().map(|k| (k.clone(), max)).collect();
        self.get_each_limited(&keys)
    }

    /// Read many objects at once, each of at most its own number of bytes (up to 32
    /// requests in flight); each object's answer on its own.
    pub fn get_each_limited(&self, keys: &[(String, u64)]) -> Vec<Result<Option<Vec<u8>>>> {
        let url = self.describe();
        let url = url.as_str();
        let s3 = self.fan_out(
            keys,
            |(k, _)| k.as_str(),
            |store, p, (k, max)| async move {
                if let Err(rule) = check_key(k) {
                    return Ok(Err(refused(url, k, &rule)));
                }
                Ok(s3_get(store, p, *max, url).await.map(|o| o.map(|(b, _)| b)))
            },
        );
        match s3 {
            Some(Ok(v)) => v,
            Some(Err(e)) => keys.iter().map(|_| Err(e.clone())).collect(),
            None => keys
                .iter()
                .map(|(k, max)| Ok(self.get_limited(k, *max)?.map(|(b, _)| b)))
                .collect(),
        }
    }

    /// Whether each of many objects exists (up to 32 requests in flight).
    pub fn exists_many(&self, keys: &[String]) -> Result<Vec<bool>> {
        let s3 = self.fan_out(keys, |k| k.as_str(), |store, p, _| s3_exists(store, p));
        s3.unwrap_or_else(|| keys.iter().map(|k| self.exists(k)).collect())
    }

    /// Create many objects at once, each only if absent (up to 32 requests in flight).
    pub fn create_many(&self, items: &[(String, Vec<u8>)]) -> Result<Vec<Put>> {
        let s3 = self.fan_out(
            items,
            |(k, _)| k.as_str(),
            |store, p, (_, b)| s3_put(store, p, b.clone(), None),
        );
        s3.unwrap_or_else(|| items.iter().map(|(k, b)| self.put(k, b, None)).collect())
    }

    /// Every key under `prefix` (relative to the remote's prefix), sorted.
    pub fn list(&self, under: &str) -> Result<Vec<String>> {
        match self {
            Bucket::S3 {
                store, prefix, rt, ..
            } => {
                use futures::StreamExt;
                let p = Self::key(prefix, under.trim_end_matches('/'));
                let strip = if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/")
                };
                let mut out = rt.block_on(async {
                    let mut s = store.list(Some(&p));
                    let mut keys = Vec::new();
                    while let Some(m) = s.next().await {
                        let m = m.map_err(|e| remote_err(format!("cannot list {p}"), e))?;
                        let k = m.location.to_string();
                        keys.push(k.strip_prefix(&strip).unwrap_or(&k).to_string());
                    }
                    Ok::<_, Error>(keys)
                })?;
                out.sort();
                Ok(out)
            }
            Bucket::Dir { root } => {
                let mut out = Vec::new();
                list_dir(root, Path::new(under.trim_end_matches('/')), &mut out)?;
                out.sort();
                Ok(out)
            }
        }
    }

    /// The names directly below `under` (one level, like directories).
    pub fn children(&self, under: &str) -> Result<Vec<String>> {
        match self {
            Bucket::S3 {
                store, prefix, rt, ..
            } => {
                let p = Self::key(prefix, under.trim_end_matches('/'));
                let r = rt
                    .block_on(store.list_with_delimiter(Some(&p)))
                    .map_err(|e| remote_err(format!("cannot list {p}"), e))?;
                let mut out: Vec<String> = r
                    .common_prefixes
                    .iter()
                    .filter_map(|c| c.filename().map(str::to_string))
                    .collect();
                out.sort();
                Ok(out)
            }
            Bucket::Dir { root } => {
                let d = root.join(under.trim_end_matches('/'));
                let mut out = Vec::new();
                match std::fs::read_dir(&d) {
                    Ok(rd) => {
                        for e in rd.flatten() {
                            if e.path().is_dir() {
                                out.push(e.file_name().to_string_lossy().into_owned());
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(d.display(), e)),
                }
                out.sort();
                Ok(out)
            }
        }
    }

    /// The URL this bucket was opened from (for messages).
    pub fn describe(&self) -> String {
        match self {
            Bucket::S3 { url, .. } => url.clone(),
            Bucket::Dir { root } => format!("file://{}", root.display()),
        }
    }
}

/// An object's bytes and version, `None` when absent (one GET).
async fn s3_get(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    max: u64,
    url: &str,
) -> Result<Option<(Vec<u8>, Version)>> {
    match store.get(&p).await {
        Ok(r) => {
            let v = version_of(&r.meta);
            let size = r.meta.size;
            if size > max {
                return Err(refused(url, p.as_ref(), &too_big(size, max)));
            }
            let b = r.bytes().await.map_err(|e| remote_err(&p, e))?;
            if b.len() as u64 > max {
                return Err(refused(url, p.as_ref(), &too_big(b.len() as u64, max)));
            }
            Ok(Some((b.to_vec(), v)))
        }
        Err(e @ object_store::Error::NotFound { .. }) => match no_such_bucket(&e.to_string()) {
            // A missing bucket is not a missing object.
            Some(_) => Err(remote_err(format!("cannot read {p}"), e)),
            None => Ok(None),
        },
        Err(e) => Err(remote_err(format!("cannot read {p}"), e)),
    }
}

/// A conditional PUT: create-if-absent (`expect` None) or replace-if-unchanged (the
/// version read); `Conflict` when the condition failed (an update's object vanished too).
async fn s3_put(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    bytes: Vec<u8>,
    expect: Option<Version>,
) -> Result<Put> {
    let mode = match &expect {
        None => PutMode::Create,
        Some(v) => PutMode::Update(UpdateVersion {
            e_tag: Some(v.0.clone()),
            version: None,
        }),
    };
    let opts = PutOptions {
        mode,
        ..Default::default()
    };
    match store.put_opts(&p, bytes.into(), opts).await {
        Ok(_) => Ok(Put::Done),
        Err(object_store::Error::AlreadyExists { .. })
        | Err(object_store::Error::Precondition { .. }) => Ok(Put::Conflict),
        Err(e @ object_store::Error::NotFound { .. })
            if expect.is_some() && no_such_bucket(&e.to_string()).is_none() =>
        {
            Ok(Put::Conflict)
        }
        Err(e) => Err(remote_err(format!("cannot write {p}"), e)),
    }
}

/// Whether an object exists (one HEAD).
async fn s3_exists(store: Arc<dyn ObjectStore>, p: object_store::path::Path) -> Result<bool> {
    match store.head(&p).await {
        Ok(_) => Ok(true),
        Err(e @ object_store::Error::NotFound { .. })
            if no_such_bucket(&e.to_string()).is_none() =>
        {
            Ok(false)
        }
        Err(e) => Err(remote_err(format!("cannot read {p}"), e)),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the remote's I/O runtime", e))
}

fn version_of(m: &object_store::ObjectMeta) -> Version {
    Version(m.e_tag.clone().unwrap_or_default())
}

fn bad_url(url: &str) -> Error {
    Error::new(
        Code::Usage,
        format!("{url:?} is not a remote URL"),
        "give s3://BUCKET[/PREFIX] (an S3-compatible server through AWS_ENDPOINT_URL) or file:///ABSOLUTE/DIR",
    )
}

fn too_big(n: u64, max: u64) -> String {
    format!("it is {n} bytes, more than the {max} bytes its manifest or kind allows")
}

/// A shared directory's object: every component reached without following a symlink, the
/// object a regular file of at most `max` bytes, read with that limit.
fn dir_get(root: &Path, key: &str, max: u64, url: &str) -> Result<Option<(Vec<u8>, Version)>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let parts: Vec<&str> = key.split('/').collect();
    let mut cur = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        cur.push(part);
        let md = match std::fs::symlink_metadata(&cur) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(cur.display(), e)),
        };
        let last = i + 1 == parts.len();
        if md.file_type().is_symlink() {
            return Err(refused(
                url,
                key,
                "it is reached through a symlink; a remote's objects are read without following one",
            ));
        }
        if !last && !md.is_dir() {
            return Ok(None);
        }
        if last && !md.is_file() {
            return Err(refused(url, key, "it is not a regular file"));
        }
        if last && md.len() > max {
            return Err(refused(url, key, &too_big(md.len(), max)));
        }
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&cur)
        .map_err(|e| Error::io(cur.display(), e))?;
    let mut b = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut b)
        .map_err(|e| Error::io(cur.display(), e))?;
    if b.len() as u64 > max {
        return Err(refused(url, key, &too_big(b.len() as u64, max)));
    }
    let v = Version(revl_core::util::blake3_hex(&b));
    Ok(Some((b, v)))
}

fn list_dir(root: &Path, rel: &Path, out: &mut Vec<String>) -> Result<()> {
    let d = root.join(rel);
    let rd = match std::fs::read_dir(&d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(d.display(), e)),
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let r = rel.join(&name);
        if e.path().is_dir() {
            list_dir(root, &r, out)?;
        } else {
            out.push(r.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// A shared directory's conditional write: under an exclusive lock on `.lock` in the root
/// (flock, which NFS v4 and local filesystems honour), the current content's digest is
/// compared, then the object is replaced by rename.
fn dir_put(root: &Path, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put> {
    let path = root.join(key);
    let io = |e: std::io::Error| Error::io(path.display(), e);
    std::fs::create_dir_all(root).map_err(io)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join(".lock"))
        .map_err(io)?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io(e.into()))?;
    let current = match std::fs::read(&path) {
        Ok(b) => Some(Version(revl_core::util::blake3_hex(&b))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    if current.as_ref() != expect {
        return Ok(Put::Conflict);
    }
    revl_core::util::write_durable(&path, bytes).map_err(io)?;
    Ok(Put::Done)
}
