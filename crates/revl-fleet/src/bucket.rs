//! Where a remote's objects live, behind one interface ([`Objects`]): an S3-compatible
//! bucket (through `object_store`'s AWS client, path-style, credentials from the usual
//! `AWS_*` variables; or any other `object_store`, [`Cloud`]) or a shared directory
//! (`file://DIR`, [`SharedDir`]). Both give the three operations the fencing needs:
//! create-if-absent, replace-if-unchanged (compare-and-swap on a version), and reads that
//! return the version. [`Bucket`] is the fleet's handle on either.
use crate::untrusted::{check_key, refused, MAX_OBJECT};
use object_store::{aws::AmazonS3Builder, ObjectStore, PutMode, PutOptions, UpdateVersion};
use revl_core::{Code, Error, Result};
use std::os::unix::fs::OpenOptionsExt;
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

/// A remote's objects: the one interface the fleet reads and writes a remote through. Two
/// implementations: [`Cloud`], over any `object_store` (S3, or the tests' in-memory store),
/// and [`SharedDir`], a `file://` directory. Every implementation checks every key it is
/// given (`untrusted::check_key`: relative, no `..`, no control characters) before it
/// touches anything, bounds every read by the size its caller allows, and answers a
/// create-only write and a replace-if-unchanged write as one atomic step.
pub trait Objects: Send + Sync {
    /// The URL the objects were opened from (for messages).
    fn describe(&self) -> String;

    /// An object of at most `max` bytes (a larger one is refused, `corrupt-remote`, before
    /// its bytes are read): its bytes and version, `None` when absent.
    fn get_limited(&self, key: &str, max: u64) -> Result<Option<(Vec<u8>, Version)>>;

    /// An object of at most `max` bytes (a larger one is refused, `corrupt-remote`, before
    /// its bytes are read) given to `each` a chunk at a time as it comes, never held whole:
    /// how many bytes it holds, `None` when absent. A server sending more than it stated
    /// (a file growing while it is read) is refused; an error of `each` stops the read.
    fn read_streamed(
        &self,
        key: &str,
        max: u64,
        each: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>>;

    /// Whether an object exists.
    fn exists(&self, key: &str) -> Result<bool>;

    /// Write an object. `expect`: `None` = create only if absent; `Some(v)` = replace only
    /// if its version is still `v`.
    fn put(&self, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put>;

    /// Replace an object whatever it holds (or create it).
    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()>;

    /// Every key under `under`, in any order.
    fn list(&self, under: &str) -> Result<Vec<String>>;

    /// The names directly below `under` (one level, like directories), in any order.
    fn children(&self, under: &str) -> Result<Vec<String>>;

    /// Many reads, each object's answer on its own (one by one unless an implementation
    /// overlaps them).
    fn get_each_limited(&self, keys: &[(String, u64)]) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter()
            .map(|(k, max)| Ok(self.get_limited(k, *max)?.map(|(b, _)| b)))
            .collect()
    }

    /// Whether each of many objects exists; the first error wins.
    fn exists_many(&self, keys: &[String]) -> Result<Vec<bool>> {
        keys.iter().map(|k| self.exists(k)).collect()
    }

    /// Create many objects, each only if absent; the first error wins.
    fn create_many(&self, items: &[(String, Vec<u8>)]) -> Result<Vec<Put>> {
        items.iter().map(|(k, b)| self.put(k, b, None)).collect()
    }

    /// Read many objects of at most `max` bytes each, each answer on its own: an object of
    /// at most `small` bytes (as its server or file states it) comes in memory; a larger
    /// one is streamed, a chunk at a time, into a new file in `spill` and hashed (blake3)
    /// as it streams: memory holds at most `small` bytes per object, whatever the sizes
    /// stated.
    fn fetch_each(
        &self,
        keys: &[String],
        max: u64,
        small: u64,
        spill: &Path,
    ) -> Vec<Result<Option<Fetched>>>;
}

/// The bucket of a remote: a handle on its [`Objects`] (cheap to clone; clones share them).
#[derive(Clone)]
pub struct Bucket {
    objects: Arc<dyn Objects>,
}

/// Objects in any `object_store`: S3 (`s3://`), or any other implementation given to
/// [`Bucket::over`] (the tests' in-memory store). Requests run on the bucket's own
/// current-thread runtime; batches keep up to 32 in flight.
pub struct Cloud {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
    url: String,
}

/// Objects as files of a shared directory (`file://DIR`): every key reached without
/// following a symlink, every write under the directory's lock (`.lock`, flock), written
/// whole by rename; a version is the content's digest.
pub struct SharedDir {
    root: PathBuf,
}

/// An error of the object store, as a user can act on it: a server that cannot be reached
/// (no connection, a timeout, a request cut off) is said as such, never as an answer about
/// an object; a bucket that does not exist and missing credentials are said as such (never
/// as "object not found" or the cloud's instance-metadata address); anything else names
/// what failed and the server's answer. `url` is the remote's configured URL: a missing
/// bucket is named from it, never from the server's answer.
fn remote_err(url: &str, what: impl std::fmt::Display, e: object_store::Error) -> Error {
    if let Some(cause) = unreachable(&e) {
        return Error::new(
            Code::Io,
            format!("{what}: the server of remote {url} cannot be reached ({cause}); this command stopped there"),
            "check that the server is running and reachable from this machine (AWS_ENDPOINT_URL, the network), then run the command again",
        );
    }
    let e = e.to_string();
    if is_no_such_bucket(&e) {
        return Error::new(
            Code::Io,
            format!(
                "{what}: the bucket {} does not exist on the server",
                bucket_of(url)
            ),
            "create the bucket, or fix the remote's URL (`revl remote list` shows it; `revl remote add NAME s3://BUCKET/PREFIX`)",
        );
    }
    if !credentials_in_env() && (e.contains("169.254.169.254") || e.contains("credential")) {
        return no_credentials(&what.to_string());
    }
    Error::new(
        Code::Io,
        format!("{what}: {}", one_line(&e)),
        "check the remote's URL, that its server is reachable, and the AWS_* credentials (`revl remote list` shows the URL)",
    )
}

/// What kept a request from the server, when the network did (no connection, a timeout, a
/// request or an answer cut off), found along the error's sources: the HTTP client's kind
/// of error, the system's, or the client's own words for a request it could not send;
/// `None` for an answer of the server.
fn unreachable(e: &object_store::Error) -> Option<&'static str> {
    use object_store::client::{HttpError, HttpErrorKind as K};
    use std::io::ErrorKind as Io;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(h) = x.downcast_ref::<HttpError>() {
            match h.kind() {
                K::Connect => return Some("the connection failed"),
                K::Timeout => return Some("the request timed out"),
                K::Request | K::Interrupted => return Some("the request was cut off"),
                _ => {}
            }
        }
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            match io.kind() {
                Io::ConnectionRefused => return Some("the connection was refused"),
                Io::TimedOut => return Some("the request timed out"),
                Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe => {
                    return Some("the connection was cut off")
                }
                Io::HostUnreachable | Io::NetworkUnreachable | Io::NotConnected => {
                    return Some("the host is unreachable")
                }
                _ => {}
            }
        }
        let text = x.to_string();
        if text.contains("timed out") {
            return Some("the request timed out");
        }
        if text.contains("error sending request") {
            return Some("the request could not be sent");
        }
        cur = x.source();
    }
    None
}

/// Whether `e` is an S3 `NoSuchBucket` answer.
fn is_no_such_bucket(e: &str) -> bool {
    e.contains("NoSuchBucket")
}

/// The bucket a remote URL names (`s3://BUCKET/PREFIX`), or the URL itself.
fn bucket_of(url: &str) -> &str {
    url.strip_prefix("s3://")
        .and_then(|r| r.split('/').next())
        .filter(|b| !b.is_empty())
        .unwrap_or(url)
}

/// A server's answer on one line (its control characters escaped).
fn one_line(e: &str) -> String {
    e.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
        Ok(Bucket::of(Arc::new(Cloud {
            store,
            prefix: String::new(),
            rt: runtime()?,
            url: url.to_string(),
        })))
    }

    /// A bucket over any implementation of [`Objects`].
    pub fn of(objects: Arc<dyn Objects>) -> Bucket {
        Bucket { objects }
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
                .map_err(|e| remote_err(url, format!("cannot open {url}"), e))?;
            return Ok(Bucket::of(Arc::new(Cloud {
                store: Arc::new(store),
                prefix: prefix.trim_matches('/').to_string(),
                rt: runtime()?,
                url: url.to_string(),
            })));
        }
        let dir = url.strip_prefix("file://").ok_or_else(|| bad_url(url))?;
        Ok(Bucket::of(Arc::new(SharedDir {
            root: PathBuf::from(dir),
        })))
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
        self.objects.get_limited(key, max)
    }

    /// [`Objects::read_streamed`]: an object of at most `max` bytes given to `each` a chunk
    /// at a time (at most [`STREAM_CHUNK`] bytes of a shared directory's file held at once;
    /// a server's chunks as they arrive).
    pub fn read_streamed(
        &self,
        key: &str,
        max: u64,
        each: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        self.objects.read_streamed(key, max, each)
    }

    /// Whether an object exists.
    pub fn exists(&self, key: &str) -> Result<bool> {
        self.objects.exists(key)
    }

    /// Write an object. `expect`: `None` = create only if absent; `Some(v)` = replace only
    /// if its version is still `v`.
    pub fn put(&self, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put> {
        self.objects.put(key, bytes, expect)
    }

    /// Replace an object whatever it holds (or create it): only for content-addressed
    /// objects (a blob, a segment, a pack), whose right bytes are the only ones their name
    /// allows, when the bucket's copy fails verification (`push --repair`).
    pub fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.objects.replace(key, bytes)
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
        self.objects.get_each_limited(keys)
    }

    /// Whether each of many objects exists (up to 32 requests in flight).
    pub fn exists_many(&self, keys: &[String]) -> Result<Vec<bool>> {
        self.objects.exists_many(keys)
    }

    /// Create many objects at once, each only if absent (up to 32 requests in flight).
    pub fn create_many(&self, items: &[(String, Vec<u8>)]) -> Result<Vec<Put>> {
        self.objects.create_many(items)
    }

    /// Every key under `prefix` (relative to the remote's prefix), sorted.
    pub fn list(&self, under: &str) -> Result<Vec<String>> {
        let mut out = self.objects.list(under)?;
        out.sort();
        Ok(out)
    }

    /// The names directly below `under` (one level, like directories), sorted.
    pub fn children(&self, under: &str) -> Result<Vec<String>> {
        let mut out = self.objects.children(under)?;
        out.sort();
        Ok(out)
    }

    /// The URL this bucket was opened from (for messages).
    pub fn describe(&self) -> String {
        self.objects.describe()
    }

    /// [`Objects::fetch_each`]: large objects streamed into `spill`, never held whole.
    pub fn fetch_each(
        &self,
        keys: &[String],
        max: u64,
        small: u64,
        spill: &Path,
    ) -> Vec<Result<Option<Fetched>>> {
        self.objects.fetch_each(keys, max, small, spill)
    }
}

impl Cloud {
    /// The object path of `key`, once the key passed the checks.
    fn path(&self, key: &str) -> Result<object_store::path::Path> {
        check_key(key).map_err(|rule| refused(&self.url, key, &rule))?;
        Ok(self.under(key))
    }

    /// The object path of `key` under the remote's prefix (unchecked: a listing's prefix).
    fn under(&self, key: &str) -> object_store::path::Path {
        if self.prefix.is_empty() {
            object_store::path::Path::from(key)
        } else {
            object_store::path::Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Run `op` on each key's object path (up to 32 requests in flight), results in order;
    /// the first error wins.
    fn fan_out<'a, K, T, F, Fut>(
        &'a self,
        items: &'a [K],
        key: impl Fn(&'a K) -> &'a str,
        op: F,
    ) -> Result<Vec<T>>
    where
        F: Fn(Arc<dyn ObjectStore>, object_store::path::Path, &'a K, &'a str) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        use futures::StreamExt;
        self.rt.block_on(async {
            let futs = items.iter().map(|item| {
                op(
                    self.store.clone(),
                    self.under(key(item)),
                    item,
                    self.url.as_str(),
                )
            });
            futures::stream::iter(futs)
                .buffered(32)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect()
        })
    }
}

impl Objects for Cloud {
    fn describe(&self) -> String {
        self.url.clone()
    }

    fn read_streamed(
        &self,
        key: &str,
        max: u64,
        each: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        let p = self.path(key)?;
        let url = self.url.as_str();
        self.rt.block_on(async {
            let Some(r) = s3_open(&*self.store, &p, max, url).await? else {
                return Ok(None);
            };
            let size = r.meta.size;
            use futures::StreamExt;
            let mut chunks = r.into_stream();
            let mut n = 0u64;
            while let Some(c) = chunks.next().await {
                let c = c.map_err(|e| remote_err(url, format!("cannot read {p}"), e))?;
                if n + c.len() as u64 > size {
                    return Err(refused(
                        url,
                        p.as_ref(),
                        &format!("its server sent more than the {size} bytes it stated"),
                    ));
                }
                n += c.len() as u64;
                each(&c)?;
            }
            Ok(Some(n))
        })
    }

    fn get_limited(&self, key: &str, max: u64) -> Result<Option<(Vec<u8>, Version)>> {
        let p = self.path(key)?;
        self.rt
            .block_on(s3_get(self.store.clone(), p, max, &self.url))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        let p = self.path(key)?;
        self.rt
            .block_on(s3_exists(self.store.clone(), p, &self.url))
    }

    fn put(&self, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put> {
        let p = self.path(key)?;
        self.rt.block_on(s3_put(
            self.store.clone(),
            p,
            bytes.to_vec(),
            expect.cloned(),
            &self.url,
        ))
    }

    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let p = self.path(key)?;
        self.rt
            .block_on(self.store.put(&p, bytes.to_vec().into()))
            .map_err(|e| remote_err(&self.url, format!("cannot write {p}"), e))?;
        Ok(())
    }

    fn list(&self, under: &str) -> Result<Vec<String>> {
        use futures::StreamExt;
        let p = self.under(under.trim_end_matches('/'));
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        self.rt.block_on(async {
            let mut s = self.store.list(Some(&p));
            let mut keys = Vec::new();
            while let Some(m) = s.next().await {
                let m = m.map_err(|e| remote_err(&self.url, format!("cannot list {p}"), e))?;
                let k = m.location.to_string();
                keys.push(k.strip_prefix(&strip).unwrap_or(&k).to_string());
            }
            Ok(keys)
        })
    }

    fn children(&self, under: &str) -> Result<Vec<String>> {
        let p = self.under(under.trim_end_matches('/'));
        let r = self
            .rt
            .block_on(self.store.list_with_delimiter(Some(&p)))
            .map_err(|e| remote_err(&self.url, format!("cannot list {p}"), e))?;
        Ok(r.common_prefixes
            .iter()
            .filter_map(|c| c.filename().map(str::to_string))
            .collect())
    }

    fn get_each_limited(&self, keys: &[(String, u64)]) -> Vec<Result<Option<Vec<u8>>>> {
        let got = self.fan_out(
            keys,
            |(k, _)| k.as_str(),
            |store, p, (k, max), url| async move {
                if let Err(rule) = check_key(k) {
                    return Ok(Err(refused(url, k, &rule)));
                }
                Ok(s3_get(store, p, *max, url).await.map(|o| o.map(|(b, _)| b)))
            },
        );
        match got {
            Ok(v) => v,
            Err(e) => keys.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    fn exists_many(&self, keys: &[String]) -> Result<Vec<bool>> {
        for k in keys {
            self.path(k)?;
        }
        self.fan_out(
            keys,
            |k| k.as_str(),
            |store, p, _, url| s3_exists(store, p, url),
        )
    }

    fn create_many(&self, items: &[(String, Vec<u8>)]) -> Result<Vec<Put>> {
        for (k, _) in items {
            self.path(k)?;
        }
        self.fan_out(
            items,
            |(k, _)| k.as_str(),
            |store, p, (_, b), url| s3_put(store, p, b.clone(), None, url),
        )
    }

    fn fetch_each(
        &self,
        keys: &[String],
        max: u64,
        small: u64,
        spill: &Path,
    ) -> Vec<Result<Option<Fetched>>> {
        let got = self.fan_out(
            keys,
            |k| k.as_str(),
            |store, p, k, url| async move {
                if let Err(rule) = check_key(k) {
                    return Ok(Err(refused(url, k, &rule)));
                }
                Ok(s3_fetch(store, p, max, small, spill, url).await)
            },
        );
        match got {
            Ok(v) => v,
            Err(e) => keys.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

/// An object [`Bucket::fetch_each`] read: in memory, or streamed into a file.
#[derive(Debug)]
pub enum Fetched {
    Bytes(Vec<u8>),
    /// A file of `spill` holding the object, and the blake3 hex of its bytes, computed as
    /// they streamed. The caller keeps or removes it.
    File {
        path: PathBuf,
        blake3: String,
    },
}

/// An object being streamed into a new file of the cache, hashed as it comes, never past
/// the size it was stated (or judged) to have.
struct Spill {
    path: PathBuf,
    file: std::fs::File,
    hash: blake3::Hasher,
    n: u64,
    size: u64,
}

impl Spill {
    fn new(dir: &Path, size: u64) -> Result<Spill> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let path = dir.join(format!(".fetch.{}.tmp", revl_core::util::new_id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(path.display(), e))?;
        Ok(Spill {
            path,
            file,
            hash: blake3::Hasher::new(),
            n: 0,
            size,
        })
    }

    /// Write `chunk`; `Err(None)`: it would go past the size.
    fn write(&mut self, chunk: &[u8]) -> std::result::Result<(), Option<Error>> {
        use std::io::Write;
        if self.n + chunk.len() as u64 > self.size {
            return Err(None);
        }
        self.hash.update(chunk);
        self.file
            .write_all(chunk)
            .map_err(|e| Some(Error::io(self.path.display(), e)))?;
        self.n += chunk.len() as u64;
        Ok(())
    }

    /// The object kept (`streamed` went well and every byte came: `short` says otherwise),
    /// or its file removed and the error returned.
    fn finish(
        self,
        streamed: Result<()>,
        short: impl FnOnce(u64) -> Error,
    ) -> Result<Option<Fetched>> {
        let r = streamed.and_then(|()| {
            if self.n == self.size {
                Ok(())
            } else {
                Err(short(self.n))
            }
        });
        match r {
            Ok(()) => Ok(Some(Fetched::File {
                path: self.path,
                blake3: self.hash.finalize().to_hex().to_string(),
            })),
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                Err(e)
            }
        }
    }
}

/// [`s3_get`], a larger object than `small` streamed into a file of `spill`.
async fn s3_fetch(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    max: u64,
    small: u64,
    spill: &Path,
    url: &str,
) -> Result<Option<Fetched>> {
    let Some(r) = s3_open(&*store, &p, max, url).await? else {
        return Ok(None);
    };
    let size = r.meta.size;
    use futures::StreamExt;
    let more = || {
        refused(
            url,
            p.as_ref(),
            &format!("its server sent more than the {size} bytes it stated"),
        )
    };
    let mut chunks = r.into_stream();
    if size <= small {
        let mut b = Vec::with_capacity(size as usize);
        while let Some(c) = chunks.next().await {
            let c = c.map_err(|e| remote_err(url, format!("cannot read {p}"), e))?;
            if (b.len() + c.len()) as u64 > size {
                return Err(more());
            }
            b.extend_from_slice(&c);
        }
        return Ok(Some(Fetched::Bytes(b)));
    }
    let mut out = Spill::new(spill, size)?;
    let streamed: Result<()> = async {
        while let Some(c) = chunks.next().await {
            let c = c.map_err(|e| remote_err(url, format!("cannot read {p}"), e))?;
            out.write(&c).map_err(|e| e.unwrap_or_else(more))?;
        }
        Ok(())
    }
    .await;
    out.finish(streamed, |n| {
        refused(
            url,
            p.as_ref(),
            &format!("its server sent {n} of the {size} bytes it stated"),
        )
    })
}

/// [`dir_get`], a file larger than `small` streamed into a file of `spill`.
fn dir_fetch(
    root: &Path,
    key: &str,
    max: u64,
    small: u64,
    spill: &Path,
    url: &str,
) -> Result<Option<Fetched>> {
    use std::io::Read;
    let Some((mut src, cur, len)) = dir_open(root, key, max, url)? else {
        return Ok(None);
    };
    if len <= small {
        return read_judged(src, &cur, len, url, key).map(|b| Some(Fetched::Bytes(b)));
    }
    let mut out = Spill::new(spill, len)?;
    let mut buf = vec![0u8; STREAM_CHUNK];
    let streamed = loop {
        let k = match src.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(Error::io(cur.display(), e)),
        };
        if let Err(e) = out.write(&buf[..k]) {
            break Err(e.unwrap_or_else(|| grew(url, key, len)));
        }
    };
    out.finish(streamed, |n| {
        refused(
            url,
            key,
            &format!("it shrank to {n} of its {len} bytes while it was read"),
        )
    })
}

impl Objects for SharedDir {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    fn get_limited(&self, key: &str, max: u64) -> Result<Option<(Vec<u8>, Version)>> {
        dir_get(&self.root, key, max, &self.describe())
    }

    fn read_streamed(
        &self,
        key: &str,
        max: u64,
        each: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        dir_stream(&self.root, key, max, &self.describe(), each)
    }

    fn exists(&self, key: &str) -> Result<bool> {
        Ok(dir_walk(&self.root, key, false, &self.describe())?
            .is_some_and(|p| std::fs::symlink_metadata(p).is_ok()))
    }

    fn put(&self, key: &str, bytes: &[u8], expect: Option<&Version>) -> Result<Put> {
        dir_put(&self.root, key, bytes, expect, &self.describe())
    }

    fn replace(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let url = self.describe();
        let _lock = dir_lock(&self.root)?;
        let path = dir_walk(&self.root, key, true, &url)?.expect("created");
        let io = |e: std::io::Error| Error::io(path.display(), e);
        // A symlink planted at the key is replaced, never written through.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            std::fs::remove_file(&path).map_err(io)?;
        }
        revl_core::util::write_durable(&path, bytes).map_err(io)
    }

    fn list(&self, under: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        list_dir(&self.root, Path::new(under.trim_end_matches('/')), &mut out)?;
        Ok(out)
    }

    fn children(&self, under: &str) -> Result<Vec<String>> {
        let d = self.root.join(under.trim_end_matches('/'));
        let mut out = Vec::new();
        match std::fs::read_dir(&d) {
            Ok(rd) => {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        out.push(e.file_name().to_string_lossy().into_owned());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(d.display(), e)),
        }
        Ok(out)
    }

    fn fetch_each(
        &self,
        keys: &[String],
        max: u64,
        small: u64,
        spill: &Path,
    ) -> Vec<Result<Option<Fetched>>> {
        let url = self.describe();
        keys.iter()
            .map(|k| dir_fetch(&self.root, k, max, small, spill, &url))
            .collect()
    }
}

/// An object's bytes and version, `None` when absent (one GET).
async fn s3_get(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    max: u64,
    url: &str,
) -> Result<Option<(Vec<u8>, Version)>> {
    let Some(r) = s3_open(&*store, &p, max, url).await? else {
        return Ok(None);
    };
    let v = version_of(&r.meta);
    let size = r.meta.size;
    // Read chunk by chunk, never past the size the store states (itself within `max`):
    // memory grows with the bytes that came, never with a stated length.
    use futures::StreamExt;
    let mut b = Vec::with_capacity(size.min(RESERVE) as usize);
    let mut chunks = r.into_stream();
    while let Some(c) = chunks.next().await {
        let c = c.map_err(|e| remote_err(url, format!("cannot read {p}"), e))?;
        if (b.len() + c.len()) as u64 > size {
            return Err(refused(
                url,
                p.as_ref(),
                &format!("its server sent more than the {size} bytes it stated"),
            ));
        }
        b.extend_from_slice(&c);
    }
    Ok(Some((b, v)))
}

/// The object at `p` opened for reading, judged by its stated size (at most `max`); `None`
/// when absent. A missing bucket is not a missing object: it is an error.
async fn s3_open(
    store: &dyn ObjectStore,
    p: &object_store::path::Path,
    max: u64,
    url: &str,
) -> Result<Option<object_store::GetResult>> {
    let r = match store.get(p).await {
        Ok(r) => r,
        Err(e @ object_store::Error::NotFound { .. }) if is_no_such_bucket(&e.to_string()) => {
            return Err(remote_err(url, format!("cannot read {p}"), e))
        }
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(remote_err(url, format!("cannot read {p}"), e)),
    };
    if r.meta.size > max {
        return Err(refused(url, p.as_ref(), &too_big(r.meta.size, max)));
    }
    Ok(Some(r))
}

/// A conditional PUT: create-if-absent (`expect` None) or replace-if-unchanged (the
/// version read); `Conflict` when the condition failed (an update's object vanished too).
async fn s3_put(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    bytes: Vec<u8>,
    expect: Option<Version>,
    url: &str,
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
            if expect.is_some() && !is_no_such_bucket(&e.to_string()) =>
        {
            Ok(Put::Conflict)
        }
        Err(e) => Err(remote_err(url, format!("cannot write {p}"), e)),
    }
}

/// Whether an object exists (one HEAD).
async fn s3_exists(
    store: Arc<dyn ObjectStore>,
    p: object_store::path::Path,
    url: &str,
) -> Result<bool> {
    match store.head(&p).await {
        Ok(_) => Ok(true),
        Err(e @ object_store::Error::NotFound { .. }) if !is_no_such_bucket(&e.to_string()) => {
            Ok(false)
        }
        Err(e) => Err(remote_err(url, format!("cannot read {p}"), e)),
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

/// The most a read reserves before bytes arrive (it grows with what arrives).
const RESERVE: u64 = 8 << 20;

fn too_big(n: u64, max: u64) -> String {
    format!("it is {n} bytes, more than the {max} bytes its manifest or kind allows")
}

/// The path of `key` in the shared directory `root`, every component before the last
/// reached without following a symlink (one that is a symlink is refused): `None` when one
/// is missing or not a directory. `create`: a missing directory is made (one component at
/// a time, so none is made through a symlink), for a write.
fn dir_walk(root: &Path, key: &str, create: bool, url: &str) -> Result<Option<PathBuf>> {
    check_key(key).map_err(|rule| refused(url, key, &rule))?;
    let parts: Vec<&str> = key.split('/').collect();
    let mut cur = root.to_path_buf();
    for part in &parts[..parts.len() - 1] {
        cur.push(part);
        let md = match std::fs::symlink_metadata(&cur) {
            Ok(m) => m,
            Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::create_dir(&cur) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::io(cur.display(), e)),
                }
                std::fs::symlink_metadata(&cur).map_err(|e| Error::io(cur.display(), e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(cur.display(), e)),
        };
        if md.file_type().is_symlink() {
            return Err(through_symlink(url, key));
        }
        if !md.is_dir() {
            if create {
                return Err(refused(
                    url,
                    key,
                    "a component of its key is not a directory",
                ));
            }
            return Ok(None);
        }
    }
    cur.push(parts[parts.len() - 1]);
    Ok(Some(cur))
}

fn through_symlink(url: &str, key: &str) -> Error {
    refused(
        url,
        key,
        "it is reached through a symlink; a remote's objects are read and written without following one",
    )
}

/// A shared directory's object opened as it is judged: every component reached without
/// following a symlink, the object a regular file of at most `max` bytes. Its file, its path
/// and its length when judged; `None` when absent.
fn dir_open(
    root: &Path,
    key: &str,
    max: u64,
    url: &str,
) -> Result<Option<(std::fs::File, PathBuf, u64)>> {
    let Some(cur) = dir_walk(root, key, false, url)? else {
        return Ok(None);
    };
    let md = match std::fs::symlink_metadata(&cur) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(cur.display(), e)),
    };
    if md.file_type().is_symlink() {
        return Err(through_symlink(url, key));
    }
    if !md.is_file() {
        return Err(refused(url, key, "it is not a regular file"));
    }
    if md.len() > max {
        return Err(refused(url, key, &too_big(md.len(), max)));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&cur)
        .map_err(|e| Error::io(cur.display(), e))?;
    Ok(Some((f, cur, md.len())))
}

/// A file that grew past the length it was judged at while it was read.
fn grew(url: &str, key: &str, len: u64) -> Error {
    refused(
        url,
        key,
        &format!("it grew past its {len} bytes while it was read"),
    )
}

/// A shared directory's object ([`dir_open`]), read with its limit.
fn dir_get(root: &Path, key: &str, max: u64, url: &str) -> Result<Option<(Vec<u8>, Version)>> {
    let Some((f, cur, len)) = dir_open(root, key, max, url)? else {
        return Ok(None);
    };
    let b = read_judged(f, &cur, len, url, key)?;
    let v = Version(revl_core::util::blake3_hex(&b));
    Ok(Some((b, v)))
}

/// A file [`dir_open`] judged, read whole: never more than its size when it was judged (a
/// file growing meanwhile is refused, not followed).
fn read_judged(f: std::fs::File, cur: &Path, len: u64, url: &str, key: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::with_capacity(len.min(RESERVE) as usize);
    f.take(len.saturating_add(1))
        .read_to_end(&mut b)
        .map_err(|e| Error::io(cur.display(), e))?;
    if b.len() as u64 > len {
        return Err(grew(url, key, len));
    }
    Ok(b)
}

/// The most of a shared directory's file [`Bucket::read_streamed`] holds at once.
pub use revl_core::util::STREAM_CHUNK;

/// A shared directory's object ([`dir_open`]), given to `each` [`STREAM_CHUNK`] bytes at a
/// time: its length, `None` when absent. A file growing while it is read is refused.
fn dir_stream(
    root: &Path,
    key: &str,
    max: u64,
    url: &str,
    each: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<Option<u64>> {
    use std::io::Read;
    let Some((mut src, cur, len)) = dir_open(root, key, max, url)? else {
        return Ok(None);
    };
    let mut buf = vec![0u8; STREAM_CHUNK];
    let mut n = 0u64;
    loop {
        let k = match src.read(&mut buf) {
            Ok(0) => return Ok(Some(n)),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(cur.display(), e)),
        };
        if n + k as u64 > len {
            return Err(grew(url, key, len));
        }
        n += k as u64;
        each(&buf[..k])?;
    }
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
        // Never through a symlink (a hostile directory of `a -> .` links would make the
        // walk endless): a symlink is listed as a key, which every read then refuses.
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            list_dir(root, &r, out)?;
        } else {
            out.push(r.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// The exclusive lock every write to a shared directory takes: `.lock` in its root (flock,
/// which NFS v4 and local filesystems honour), held until the returned file is dropped.
fn dir_lock(root: &Path) -> Result<std::fs::File> {
    let path = root.join(".lock");
    let io = |e: std::io::Error| Error::io(path.display(), e);
    std::fs::create_dir_all(root).map_err(io)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(io)?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io(e.into()))?;
    Ok(lock)
}

/// A shared directory's conditional write, under the directory's lock ([`dir_lock`]):
/// create-only (`expect` None) checks only that nothing is at the key (a symlink there is
/// refused, and nothing is read); replace-if-unchanged reads the current object through
/// the bounded, symlink-refusing read and compares its digest; then the object is written
/// by rename, every component reached without following a symlink.
fn dir_put(
    root: &Path,
    key: &str,
    bytes: &[u8],
    expect: Option<&Version>,
    url: &str,
) -> Result<Put> {
    let _lock = dir_lock(root)?;
    let path = dir_walk(root, key, true, url)?.expect("created");
    let io = |e: std::io::Error| Error::io(path.display(), e);
    match expect {
        None => match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(through_symlink(url, key)),
            Ok(_) => return Ok(Put::Conflict),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        },
        Some(v) => {
            let current = dir_get(root, key, MAX_OBJECT, url)?.map(|(_, v)| v);
            if current.as_ref() != Some(v) {
                return Ok(Put::Conflict);
            }
        }
    }
    revl_core::util::write_durable(&path, bytes).map_err(io)?;
    Ok(Put::Done)
}
