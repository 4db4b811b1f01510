//! The fleet's logic on `object_store`'s in-memory store (docs/fleet.md): a push, a read of
//! it in a second store, a hostile object refused and its session marked unreadable, and
//! `push --repair` making it read again. The same code as an S3 remote's (`Bucket::over`),
//! in plain `cargo test`; the S3-compatible server and PostgreSQL runs are in the CLI's
//! tests (crates/revl/tests/it/fleet.rs).

use object_store::{memory::InMemory, path::Path as Key, ObjectStore, PutPayload};
use revl_core::workspace::FileOp;
use revl_core::{Code, Failpoints, Store};
use revl_fleet::pull::{bucket_manifests, Reader};
use revl_fleet::push::{push_with, Mode};
use revl_fleet::{Bucket, Remote};
use std::sync::Arc;

struct World {
    _tmp: tempfile::TempDir,
    objects: Arc<InMemory>,
    a: Store,
    b: Store,
    remote: Remote,
    id: String,
    big: Vec<u8>,
}

fn bucket(objects: &Arc<InMemory>) -> Bucket {
    Bucket::over(objects.clone(), "memory://test").unwrap()
}

fn write(path: &str, content: &[u8]) -> FileOp {
    FileOp::Write {
        path: path.into(),
        content: content.to_vec(),
    }
}

/// Store A ran a session (a base tree, a small and a large write) and pushed it.
fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    let a = Store::open(&tmp.path().join("a"), Failpoints::none()).unwrap();
    let b = Store::open(&tmp.path().join("b"), Failpoints::none()).unwrap();
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let mut s = a.new_session(&ws, None).unwrap();
    let id = s.id().to_string();
    a.capture_base(&id, &ws).unwrap();
    s.file_effect(write("a.txt", b"one")).unwrap();
    s.file_effect(write("big.bin", &big)).unwrap();
    drop(s);
    let remote = Remote {
        name: "origin".into(),
        url: "memory://test".into(),
        index: None,
    };
    let objects = Arc::new(InMemory::new());
    let r = push_with(&a, &remote, &bucket(&objects), &[], Mode::Extend).unwrap();
    assert_eq!(r.pushed.len(), 1);
    World {
        _tmp: tmp,
        objects,
        a,
        b,
        remote,
        id,
        big,
    }
}

impl World {
    fn reader(&self) -> Reader {
        Reader::over(&self.b, &self.remote, bucket(&self.objects)).unwrap()
    }

    fn rt(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn get(&self, key: &str) -> Vec<u8> {
        let k = Key::from(key);
        self.rt()
            .block_on(async { self.objects.get(&k).await.unwrap().bytes().await.unwrap() })
            .to_vec()
    }

    /// An attacker's write: any bytes at any key.
    fn plant(&self, key: &str, bytes: &[u8]) {
        let k = Key::from(key);
        self.rt()
            .block_on(self.objects.put(&k, PutPayload::from(bytes.to_vec())))
            .unwrap();
    }

    fn read_big(&self, r: &Reader) -> revl_core::Result<Vec<u8>> {
        r.sync_family(&self.id)?;
        let s = r.mirror.attach_read(&self.id)?;
        let got = s.read_at("big.bin", 2)?;
        Ok(got
            .content
            .map(String::into_bytes)
            .or_else(|| {
                use base64::Engine;
                got.content_base64
                    .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
            })
            .unwrap())
    }
}

#[test]
fn a_session_pushed_to_memory_reads_in_another_store_byte_for_byte() {
    let w = world();
    let r = w.reader();
    assert_eq!(w.read_big(&r).unwrap(), w.big);
    let base = r
        .mirror
        .attach_read(&w.id)
        .unwrap()
        .read_at("README", 0)
        .unwrap();
    assert_eq!(base.content.as_deref(), Some("hello\n"));
    // A second push with nothing new writes nothing.
    let again = push_with(&w.a, &w.remote, &bucket(&w.objects), &[], Mode::Extend).unwrap();
    assert_eq!((again.pushed[0].blobs, again.pushed[0].bytes), (0, 0));
    // The mirror's WAL and the verified one the cache starts from are one file on disk.
    use std::os::unix::fs::MetadataExt;
    let mirror = std::fs::metadata(w.reader().mirror.wal_path(&w.id)).unwrap();
    let verified =
        w.b.root()
            .join(format!("remotes/origin/verified/{}.wal", w.id));
    let verified = std::fs::metadata(verified).unwrap();
    assert_eq!(
        (mirror.dev(), mirror.ino()),
        (verified.dev(), verified.ino())
    );
}

#[test]
fn an_altered_blob_marks_its_session_unreadable_until_push_repair() {
    let w = world();
    let digest = blake3::hash(&w.big).to_hex().to_string();
    let key = format!("blobs/{digest}");
    let good = w.get(&key);
    w.plant(&key, b"not what its name says");
    let r = w.reader();
    let e = w.read_big(&r).unwrap_err();
    assert_eq!(e.code, Code::CorruptRemote, "{e:?}");
    assert!(e.message.contains(&key), "names the object: {}", e.message);
    // The mark: the session is refused again at once, even with the object put right
    // behind the manifest's back (judged again only when the manifest changes).
    w.plant(&key, &good);
    let again = w.read_big(&w.reader()).unwrap_err();
    assert_eq!(again.message, e.message);
    w.plant(&key, b"not what its name says");
    // A plain push has nothing new: it uploads nothing.
    let plain = push_with(&w.a, &w.remote, &bucket(&w.objects), &[], Mode::Extend).unwrap();
    assert!(plain.pushed[0].repaired.is_empty());
    assert!(w.read_big(&w.reader()).is_err());
    // --repair finds the altered blob, uploads it again, and writes a new epoch.
    let ids = [w.id.clone()];
    let fixed = push_with(&w.a, &w.remote, &bucket(&w.objects), &ids, Mode::Repair).unwrap();
    assert_eq!(fixed.pushed[0].repaired, vec![key.clone()]);
    assert_eq!(fixed.pushed[0].remote_head["epoch"], 2);
    assert_eq!(w.get(&key), good);
    assert_eq!(w.read_big(&w.reader()).unwrap(), w.big);
    // Nothing left to repair: a second --repair uploads nothing again, and still writes a
    // new epoch (readers judge the session again).
    let none = push_with(&w.a, &w.remote, &bucket(&w.objects), &ids, Mode::Repair).unwrap();
    assert!(none.pushed[0].repaired.is_empty());
    assert_eq!(none.pushed[0].remote_head["epoch"], 3);
    assert_eq!(w.read_big(&w.reader()).unwrap(), w.big);
}

#[test]
fn a_manifest_stating_another_lineage_is_not_believed_and_repair_restores_it() {
    let w = world();
    let key = format!("sessions/{}/manifest.json", w.id);
    let mut m: serde_json::Value = serde_json::from_slice(&w.get(&key)).unwrap();
    m["parent"] = "0123456789abcdef0123456789abcdef".into();
    m["at"] = 1.into();
    m["head"] = 99.into();
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    let r = w.reader();
    let (ok, bad) = bucket_manifests(&r).unwrap();
    assert!(ok.is_empty(), "a forged lineage is believed: {ok:?}");
    assert_eq!(bad.len(), 1);
    assert!(bad[0].message.contains("lineage"), "{}", bad[0].message);
    let ids = [w.id.clone()];
    let fixed = push_with(&w.a, &w.remote, &bucket(&w.objects), &ids, Mode::Repair).unwrap();
    // A lineage-only fix is a repair: the report says the manifest was put right.
    assert_eq!(fixed.pushed[0].repaired, vec![key.clone()]);
    assert_eq!(fixed.pushed[0].remote_head["epoch"], 2);
    let (ok, bad) = bucket_manifests(&w.reader()).unwrap();
    assert_eq!((ok.len(), bad.len()), (1, 0));
    assert_eq!((ok[0].parent.clone(), ok[0].head), (None, 2));
}

#[test]
fn a_manifest_that_is_not_one_is_replaced_by_repair() {
    let w = world();
    let key = format!("sessions/{}/manifest.json", w.id);
    w.plant(&key, br#"{"epoch": 7, "writer": "a\r\u0000b"}"#);
    let e = push_with(&w.a, &w.remote, &bucket(&w.objects), &[], Mode::Extend).unwrap_err();
    assert_eq!(e.code, Code::CorruptRemote);
    assert!(e.hint.contains("--repair"), "{}", e.hint);
    let ids = [w.id.clone()];
    let fixed = push_with(&w.a, &w.remote, &bucket(&w.objects), &ids, Mode::Repair).unwrap();
    assert_eq!(fixed.pushed[0].repaired, vec![key]);
    assert_eq!(fixed.pushed[0].remote_head["epoch"], 8);
    assert_eq!(w.read_big(&w.reader()).unwrap(), w.big);
}

#[test]
fn a_forged_lineage_with_the_wal_of_an_honest_read_is_not_believed() {
    let w = world();
    // One honest read: the verification is cached.
    let r = w.reader();
    let (ok, bad) = bucket_manifests(&r).unwrap();
    assert_eq!((ok.len(), bad.len()), (1, 0));
    assert_eq!(w.read_big(&r).unwrap(), w.big);
    // The same WAL fields, another lineage.
    let key = format!("sessions/{}/manifest.json", w.id);
    let mut m: serde_json::Value = serde_json::from_slice(&w.get(&key)).unwrap();
    m["parent"] = "0123456789abcdef0123456789abcdef".into();
    m["at"] = 1.into();
    m["state"] = "committed".into();
    m["head"] = 99.into();
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    let (ok, bad) = bucket_manifests(&w.reader()).unwrap();
    assert!(
        ok.is_empty(),
        "a forged lineage is believed from the cache: {ok:?}"
    );
    assert!(bad[0].message.contains("lineage"), "{}", bad[0].message);
    let e = w.reader().sync(&w.id).unwrap_err();
    assert_eq!(e.code, Code::CorruptRemote, "{e:?}");
}

#[test]
fn a_manifest_stating_more_than_the_index_holds_is_refused_and_repair_stays_in_bounds() {
    let w = world();
    let key = format!("sessions/{}/manifest.json", w.id);
    let honest: serde_json::Value = serde_json::from_slice(&w.get(&key)).unwrap();
    for (field, v) in [
        ("epoch", u64::MAX),
        ("head", i64::MAX as u64 + 1),
        ("walLength", i64::MAX as u64 + 1),
        ("walLength", (1u64 << 40) + 1),
    ] {
        let mut m = honest.clone();
        m[field] = v.into();
        w.plant(&key, &serde_json::to_vec(&m).unwrap());
        let (ok, bad) = bucket_manifests(&w.reader()).unwrap();
        assert!(ok.is_empty(), "{field} = {v} believed");
        assert!(bad[0].message.contains(field), "{}", bad[0].message);
    }
    // --repair of a refused manifest claiming the largest epoch: the new one still fits
    // an index row (i64) and reads.
    let mut m = honest.clone();
    m["epoch"] = u64::MAX.into();
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    let ids = [w.id.clone()];
    let fixed = push_with(&w.a, &w.remote, &bucket(&w.objects), &ids, Mode::Repair).unwrap();
    let epoch = fixed.pushed[0].remote_head["epoch"].as_u64().unwrap();
    assert!(epoch <= i64::MAX as u64, "{epoch}");
    assert_eq!(w.read_big(&w.reader()).unwrap(), w.big);
    // A head at the largest epoch is not pushed past.
    w.a.attach(&w.id)
        .unwrap()
        .file_effect(write("c.txt", b"more"))
        .unwrap();
    let e = push_with(&w.a, &w.remote, &bucket(&w.objects), &[], Mode::Extend).unwrap_err();
    assert_eq!(e.code, Code::CorruptRemote, "{e:?}");
    assert!(e.message.contains("epoch"), "{}", e.message);
}

/// A server answering every request with `status` and `body` (an S3 error document).
fn answering(status: &str, body: &'static str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let status = status.to_string();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut buf = [0u8; 65536];
            let _ = c.read(&mut buf);
            let _ = write!(
                c,
                "HTTP/1.1 {status}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

fn s3_at(endpoint: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name("configured-bucket")
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("revl-test")
            .with_secret_access_key("revl-test")
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .build()
            .unwrap(),
    )
}

#[test]
fn a_missing_bucket_is_named_from_the_url_and_refused_credentials_are_not_called_absent() {
    // The credentials are in the environment (as a user's would be).
    std::env::set_var("AWS_ACCESS_KEY_ID", "revl-test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "revl-test");
    let missing = answering(
        "404 Not Found",
        "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>planted-name</BucketName></Error>",
    );
    let b = Bucket::over(s3_at(&missing), "s3://configured-bucket/p").unwrap();
    let e = b.get("sessions/x/manifest.json").unwrap_err();
    assert!(
        e.message
            .contains("the bucket configured-bucket does not exist"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("planted-name"), "{}", e.message);
    let denied = answering(
        "403 Forbidden",
        "<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does not exist in our records (credential refused)</Message></Error>",
    );
    let b = Bucket::over(s3_at(&denied), "s3://configured-bucket/p").unwrap();
    let e = b.get("sessions/x/manifest.json").unwrap_err();
    assert!(
        !e.message.contains("no AWS credentials are set"),
        "{}",
        e.message
    );
    assert!(e.message.contains("InvalidAccessKeyId"), "{}", e.message);
    assert!(!e.message.contains('\n'), "{}", e.message);
}

#[test]
fn a_remote_cache_is_a_read_only_store_the_local_verbs_read() {
    use revl_fleet::{Catalog, RemoteCache};
    let w = world();
    let cache = RemoteCache::of(&w.b, w.reader());
    // A prefix is resolved among the remote's sessions; the session is pulled, verified.
    let id = cache.session(&w.id[..8]).unwrap();
    assert_eq!(id, w.id);
    // The same verbs give the same documents as on the store that ran it.
    let here = w.a.attach_read(&w.id).unwrap();
    let there = cache.store().attach_read(&id).unwrap();
    use revl_core::report::to_json as doc;
    assert_eq!(
        doc(&there.timeline())["steps"],
        doc(&here.timeline())["steps"]
    );
    for k in [-1, 1, 2] {
        assert_eq!(
            doc(&there.read_at("big.bin", k).map_err(|e| e.code.as_str())),
            doc(&here.read_at("big.bin", k).map_err(|e| e.code.as_str())),
            "big.bin at {k}"
        );
    }
    let listing = cache.listing(None).unwrap();
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    let log = revl_core::log::log(cache.store(), listing.session.as_deref()).unwrap();
    assert_eq!(doc(&log)["sessions"][0]["session"], w.id.as_str());
    drop((here, there));
    // The cache is read-only: a verb that writes is refused, nothing is recorded.
    let e = cache
        .store()
        .attach(&id)
        .unwrap()
        .file_effect(write("x", b"1"))
        .unwrap_err();
    assert_eq!(e.code, Code::Usage, "{e:?}");
    assert_eq!(cache.store().attach_read(&id).unwrap().state().head(), 2);
    // A hostile object refuses its session through the cache of a third store, which the
    // listing names as unreadable instead of failing.
    let c = Store::open(&w._tmp.path().join("c"), Failpoints::none()).unwrap();
    let key = format!("blobs/{}", blake3::hash(&w.big).to_hex());
    w.plant(&key, b"not what its name says");
    let cache = RemoteCache::of(&c, Reader::over(&c, &w.remote, bucket(&w.objects)).unwrap());
    let listing = cache.listing(None).unwrap();
    assert_eq!(listing.unreadable.len(), 1);
    assert_eq!(listing.unreadable[0].session, w.id);
    let e = cache.session(&w.id).unwrap_err();
    assert_eq!(e.code, Code::CorruptRemote, "{e:?}");
    assert!(e.message.contains(&key), "{}", e.message);
}

/// A manifest stating a WAL of a tebibyte (within the manifest's own bound) in segments
/// of 5 GiB, each as large as one object may be.
fn tebibyte_manifest(honest: &serde_json::Value, id: &str) -> serde_json::Value {
    let (seg, total) = (5u64 << 30, 1u64 << 40);
    let sha = "ab".repeat(32);
    let mut segments = Vec::new();
    let mut from = 0;
    while from < total {
        let to = (from + seg).min(total);
        segments.push(serde_json::json!({
            "key": format!("sessions/{id}/wal/{from:020}-{to:020}-{sha}"),
            "from": from, "to": to, "sha256": sha,
        }));
        from = to;
    }
    let mut m = honest.clone();
    m["walLength"] = total.into();
    m["segments"] = segments.into();
    m
}

#[test]
fn sizes_a_remote_states_never_decide_what_is_read() {
    let w = world();
    let key = format!("sessions/{}/manifest.json", w.id);
    let honest: serde_json::Value = serde_json::from_slice(&w.get(&key)).unwrap();
    // A stated WAL of 1 TiB: refused by revl's own read limit, before any segment is read.
    let m = tebibyte_manifest(&honest, &w.id);
    let first = m["segments"][0]["key"].as_str().unwrap().to_string();
    w.plant(&first, &vec![0u8; 1 << 20]);
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    let (ok, bad) = bucket_manifests(&w.reader()).unwrap();
    assert!(ok.is_empty());
    let msg = &bad[0].message;
    assert!(msg.contains(&key), "{msg}");
    assert!(
        msg.contains("more than revl reads of a remote WAL"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    // A segment object much bigger than its manifest states: refused, not read.
    w.plant(&key, &serde_json::to_vec(&honest).unwrap());
    let seg = honest["segments"][0]["key"].as_str().unwrap().to_string();
    let mut bigger = w.get(&seg);
    bigger.resize(bigger.len() + (64 << 20), b'x');
    w.plant(&seg, &bigger);
    let mut m = honest.clone();
    m["epoch"] = 9.into();
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    let (ok, bad) = bucket_manifests(&w.reader()).unwrap();
    assert!(ok.is_empty());
    assert!(bad[0].message.contains(&seg), "{}", bad[0].message);
    assert!(
        bad[0].message.contains("more than the"),
        "{}",
        bad[0].message
    );
}

/// The in-memory store, its reads of keys holding `down` failing as the network does (the
/// connection refused), every read and write recorded.
#[derive(Debug)]
struct Flaky {
    inner: Arc<InMemory>,
    down: &'static str,
    gets: std::sync::Mutex<Vec<String>>,
    puts: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Display for Flaky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Flaky")
    }
}

#[async_trait::async_trait]
impl ObjectStore for Flaky {
    async fn put_opts(
        &self,
        p: &Key,
        b: PutPayload,
        o: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.puts.lock().unwrap().push(p.to_string());
        self.inner.put_opts(p, b, o).await
    }
    async fn put_multipart_opts(
        &self,
        p: &Key,
        o: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(p, o).await
    }
    async fn get_opts(
        &self,
        p: &Key,
        o: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.gets.lock().unwrap().push(p.to_string());
        if p.as_ref().contains(self.down) {
            use object_store::client::{HttpError, HttpErrorKind};
            let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            return Err(object_store::Error::Generic {
                store: "S3",
                source: Box::new(HttpError::new(HttpErrorKind::Connect, refused)),
            });
        }
        self.inner.get_opts(p, o).await
    }
    async fn delete(&self, p: &Key) -> object_store::Result<()> {
        self.inner.delete(p).await
    }
    fn list(
        &self,
        p: Option<&Key>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(p)
    }
    async fn list_with_delimiter(
        &self,
        p: Option<&Key>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(p).await
    }
    async fn copy(&self, a: &Key, b: &Key) -> object_store::Result<()> {
        self.inner.copy(a, b).await
    }
    async fn copy_if_not_exists(&self, a: &Key, b: &Key) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(a, b).await
    }
}

fn flaky(w: &World, down: &'static str) -> Arc<Flaky> {
    Arc::new(Flaky {
        inner: w.objects.clone(),
        down,
        gets: Default::default(),
        puts: Default::default(),
    })
}

#[test]
fn repair_stops_at_a_network_error_and_uploads_nothing_it_did_not_find_wrong() {
    let w = world();
    let ids = [w.id.clone()];
    // The segments' reads fail as a refused connection does: not a verdict on them.
    let net = flaky(&w, "/wal/");
    let b = Bucket::over(net.clone(), "s3://fleet/p").unwrap();
    let e = push_with(&w.a, &w.remote, &b, &ids, Mode::Repair).unwrap_err();
    assert_eq!(e.code, Code::Io, "{e:?}");
    assert!(e.message.contains("cannot be reached"), "{}", e.message);
    assert!(!e.message.contains("refused:"), "{}", e.message);
    assert!(!e.message.contains('\n'), "{}", e.message);
    assert_eq!(*net.puts.lock().unwrap(), Vec::<String>::new());
    // A manifest naming a segment this store's WAL does not hold (5 GiB stated): repair
    // rewrites the manifest without reading that segment.
    let key = format!("sessions/{}/manifest.json", w.id);
    let mut m: serde_json::Value = serde_json::from_slice(&w.get(&key)).unwrap();
    let sha = "cd".repeat(32);
    let far = format!("sessions/{}/wal/{:020}-{:020}-{sha}", w.id, 0, 5u64 << 30);
    m["segments"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"key": far, "from": 0, "to": 5u64 << 30, "sha256": sha}));
    w.plant(&key, &serde_json::to_vec(&m).unwrap());
    w.plant(&far, &vec![0u8; 1 << 20]);
    let seen = flaky(&w, "nothing-is-down");
    let b = Bucket::over(seen.clone(), "s3://fleet/p").unwrap();
    let fixed = push_with(&w.a, &w.remote, &b, &ids, Mode::Repair).unwrap();
    assert_eq!(fixed.pushed[0].repaired, vec![key.clone()]);
    assert!(!seen.gets.lock().unwrap().contains(&far), "read {far}");
    assert_eq!(w.read_big(&w.reader()).unwrap(), w.big);
}

#[test]
fn repair_of_an_unreachable_endpoint_says_so() {
    let w = world();
    // Nothing listens on port 1 of the loopback: the connection is refused.
    let b = Bucket::over(s3_at("http://127.0.0.1:1"), "s3://configured-bucket/p").unwrap();
    let ids = [w.id.clone()];
    let e = push_with(&w.a, &w.remote, &b, &ids, Mode::Repair).unwrap_err();
    assert_eq!(e.code, Code::Io, "{e:?}");
    assert!(
        e.message
            .contains("the server of remote s3://configured-bucket/p cannot be reached"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("corrupt"), "{}", e.message);
}

#[test]
fn a_session_pushed_through_the_storage_traits_reads_back_byte_for_byte() {
    use revl_core::storage::{copy_journal, Blobs, Journals};
    use revl_fleet::storage::{RemoteBlobs, RemoteJournals};
    let w = world();
    let local = std::fs::read(w.a.wal_path(&w.id)).unwrap();
    let len = local.len() as u64;
    // The remote's journal is its segments and manifest, read back verified.
    let remote = RemoteJournals::reading(bucket(&w.objects), "origin");
    assert_eq!(remote.read_range(&w.id, 0, len).unwrap(), local);
    assert_eq!(
        remote.read_range(&w.id, 10, len - 5).unwrap(),
        &local[10..len as usize - 5]
    );
    let past = remote.read_range(&w.id, 0, len + 1).unwrap_err();
    assert!(past.to_string().contains("not in remote origin"), "{past}");
    // Its blobs are the objects the push made.
    let blobs = RemoteBlobs::new(bucket(&w.objects));
    let digest = blake3::hash(&w.big).to_hex().to_string();
    assert!(blobs.contains(&digest).unwrap());
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut blobs.open(&digest).unwrap().unwrap(), &mut got).unwrap();
    assert_eq!(got, w.big);
    // A copy out of the remote through the same code a push copies in with.
    let c = Store::open(&w._tmp.path().join("c"), Failpoints::none()).unwrap();
    copy_journal(&remote, &*c.storage().journals, &w.id, len).unwrap();
    assert_eq!(std::fs::read(c.wal_path(&w.id)).unwrap(), local);
    // What a remote cannot do is refused, saying why; journals opened for reading are
    // never written.
    let e = remote
        .lease(&w.id, std::time::Duration::ZERO)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
    assert!(
        e.to_string()
            .contains("a remote is written only by `revl push`"),
        "{e}"
    );
    let e = copy_journal(&*c.storage().journals, &remote, &w.id, len).unwrap_err();
    assert!(
        e.message
            .contains("a remote is written only by `revl push`"),
        "{}",
        e.message
    );
    // A remote written through the traits by another store is fenced as a push is: its
    // WAL does not extend the remote head.
    let d = Store::open(&w._tmp.path().join("d"), Failpoints::none()).unwrap();
    let ws = w._tmp.path().join("ws2");
    std::fs::create_dir_all(&ws).unwrap();
    let other = d.new_session(&ws, None).unwrap().id().to_string();
    let theirs = std::fs::read(d.wal_path(&other)).unwrap();
    let writing = RemoteJournals::written_by(bucket(&w.objects), "origin", &d).unwrap();
    let e = writing.create(&w.id, &theirs).unwrap_err();
    let e = revl_core::storage::trait_error("push", e);
    assert_eq!(e.code, Code::Fenced, "{e:?}");
    assert_eq!(remote.read_range(&w.id, 0, len).unwrap(), local);
}

/// Every object of a bucket, the manifests without the time they were pushed at.
fn objects_of(b: &Bucket) -> Vec<(String, Vec<u8>)> {
    b.list("")
        .unwrap()
        .into_iter()
        .filter(|k| !k.ends_with(".lock"))
        .map(|k| {
            let mut bytes = b.get(&k).unwrap().unwrap().0;
            if k.ends_with("manifest.json") {
                let mut m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                m["pushedAt"] = "-".into();
                bytes = serde_json::to_vec(&m).unwrap();
            }
            (k, bytes)
        })
        .collect()
}

#[test]
fn a_push_to_memory_and_a_push_to_a_file_remote_are_the_same_objects() {
    let w = world();
    let dir = w._tmp.path().join("shared");
    let file = Bucket::open(&format!("file://{}", dir.display())).unwrap();
    // The push world() made to memory, made to the shared directory too; then one more
    // step pushed to both (a second segment, a new epoch).
    push_with(&w.a, &w.remote, &file, &[], Mode::Extend).unwrap();
    w.a.attach(&w.id)
        .unwrap()
        .file_effect(write("c.txt", b"more"))
        .unwrap();
    for b in [bucket(&w.objects), file.clone()] {
        let r = push_with(&w.a, &w.remote, &b, &[], Mode::Extend).unwrap();
        assert_eq!(r.pushed[0].remote_head["epoch"], 2);
        assert_eq!(r.pushed[0].segments, 1);
    }
    let mem = objects_of(&bucket(&w.objects));
    let shared = objects_of(&file);
    assert!(mem.iter().any(|(k, _)| k.starts_with("blobs/")), "{mem:?}");
    assert_eq!(
        mem.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        shared.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert_eq!(mem, shared);
}

#[test]
fn a_verified_wal_cut_short_in_the_cache_is_not_believed() {
    let w = world();
    let r = w.reader();
    assert_eq!(w.read_big(&r).unwrap(), w.big);
    drop(r);
    // The cache's verified WAL (one file with the mirror's) loses its tail, as a full disk
    // or a hand edit leaves it, its record of what was verified intact.
    let verified =
        w.b.root()
            .join(format!("remotes/origin/verified/{}.wal", w.id));
    let len = std::fs::metadata(&verified).unwrap().len();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&verified, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&verified)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    // The next read fetches and verifies it again: the session reads whole.
    let r = w.reader();
    assert_eq!(w.read_big(&r).unwrap(), w.big);
    assert_eq!(std::fs::metadata(&verified).unwrap().len(), len);
    assert_eq!(
        std::fs::metadata(r.mirror.wal_path(&w.id)).unwrap().len(),
        len
    );
}

#[test]
fn a_shared_directory_of_symlink_loops_lists_without_following_them() {
    // A hostile `file://` directory: links back to itself at two levels. Followed, each
    // level doubles the walk until the path is too long and the whole listing fails.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("remote");
    std::fs::create_dir_all(root.join("sessions/s1")).unwrap();
    std::fs::write(root.join("sessions/s1/manifest.json"), b"{}").unwrap();
    std::os::unix::fs::symlink(".", root.join("sessions/a")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sessions/s1/b")).unwrap();
    let b = Bucket::open(&format!("file://{}", root.display())).unwrap();
    let mut keys = b.list("sessions").unwrap();
    keys.sort();
    assert_eq!(
        keys,
        ["sessions/a", "sessions/s1/b", "sessions/s1/manifest.json"],
        "a symlink is a key, never a directory walked"
    );
    assert_eq!(b.children("sessions").unwrap(), ["s1"]);
}

#[test]
fn a_copy_into_a_local_store_replaces_a_damaged_blob_it_holds() {
    use revl_core::storage::{copy_blobs, Blobs, Durability, LocalBlobs};
    // A blob put without a sync (a batch, or a cache) may be damaged by a crash: a copy
    // into this store must not take "the file is there" for "the blob is intact".
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (
        LocalBlobs::new(tmp.path().join("from")),
        LocalBlobs::new(tmp.path().join("to")),
    );
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let digest = revl_core::util::blake3_hex(&big);
    from.put(&digest, &big, Durability::Synced).unwrap();
    to.put(&digest, &big, Durability::Synced).unwrap();
    let held = to.dir().unwrap().join(&digest[..2]).join(&digest[2..]);
    std::fs::write(&held, &big[..1000]).unwrap();
    copy_blobs(
        &from,
        &to,
        std::slice::from_ref(&digest),
        Durability::Synced,
        &mut || {},
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&held).unwrap(),
        big,
        "the damaged blob was kept"
    );
}
