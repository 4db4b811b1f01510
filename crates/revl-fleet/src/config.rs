//! A store's remotes: `<store>/remotes.toml` (`[remotes.NAME] url = "...", index = "..."`),
//! and the store's id (`<store>/store-id`), which a manifest names as its writer.

use revl_core::{Code, Error, Result, Store};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Remotes {
    #[serde(default)]
    pub remotes: BTreeMap<String, RemoteConf>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RemoteConf {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
}

/// One configured remote of a store.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Remote {
    pub name: String,
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
}

fn path(store: &Store) -> PathBuf {
    store.root().join("remotes.toml")
}

impl Remotes {
    pub fn load(store: &Store) -> Result<Remotes> {
        let p = path(store);
        match std::fs::read_to_string(&p) {
            Ok(s) => toml::from_str(&s).map_err(|e| {
                Error::new(
                    Code::Usage,
                    format!("{} does not parse: {e}", p.display()),
                    "fix or remove that file, then `revl remote add NAME URL` again",
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Remotes::default()),
            Err(e) => Err(Error::io(p.display(), e)),
        }
    }

    pub fn save(&self, store: &Store) -> Result<()> {
        let p = path(store);
        let s = toml::to_string(self).map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot write {}: {e}", p.display()),
                "check the store",
            )
        })?;
        revl_core::util::write_durable(&p, s.as_bytes()).map_err(|e| Error::io(p.display(), e))
    }

    pub fn get(&self, name: &str) -> Result<Remote> {
        match self.remotes.get(name) {
            Some(c) => Ok(Remote {
                name: name.to_string(),
                url: c.url.clone(),
                index: c.index.clone(),
            }),
            None => Err(Error::new(
                Code::Usage,
                format!("no remote named {name:?} in this store"),
                "`revl remote add NAME URL` adds one; `revl remote list` lists them",
            )),
        }
    }

    /// The remote named, or the store's only one when none is.
    pub fn pick(&self, name: Option<&str>) -> Result<Remote> {
        if let Some(n) = name {
            return self.get(n);
        }
        let mut list = self.list();
        match list.len() {
            1 => Ok(list.remove(0)),
            0 => Err(Error::new(
                Code::Usage,
                "this store has no remote",
                "`revl remote add NAME s3://BUCKET/PREFIX` (or file:///DIR) first",
            )),
            _ => {
                let names: Vec<&str> = list.iter().map(|r| r.name.as_str()).collect();
                Err(Error::new(
                    Code::Usage,
                    format!(
                        "this store has {} remotes ({}): say which",
                        names.len(),
                        names.join(", ")
                    ),
                    format!("--remote {} (or another of them)", names[0]),
                ))
            }
        }
    }

    pub fn list(&self) -> Vec<Remote> {
        self.remotes
            .iter()
            .map(|(n, c)| Remote {
                name: n.clone(),
                url: c.url.clone(),
                index: c.index.clone(),
            })
            .collect()
    }
}

/// `revl remote add NAME URL`: checks the name and the URL (without reaching the server).
pub fn add(store: &Store, name: &str, url: &str) -> Result<Remote> {
    if !revl_core::lineage::is_remote_name(name) {
        return Err(Error::new(
            Code::Usage,
            format!("{name:?} is not a remote name"),
            "use letters, digits, - and _ (at most 64), e.g. origin",
        ));
    }
    crate::Bucket::check_url(url)?;
    let mut all = Remotes::load(store)?;
    if let Some(c) = all.remotes.get(name) {
        if c.url == url {
            return all.get(name);
        }
        return Err(Error::new(
            Code::Usage,
            format!("remote {name} already exists (URL {})", c.url),
            "pick another name",
        ));
    }
    all.remotes.insert(
        name.to_string(),
        RemoteConf {
            url: url.to_string(),
            index: None,
        },
    );
    all.save(store)?;
    all.get(name)
}

/// The store's id, made on first use.
pub fn store_id(store: &Store) -> Result<String> {
    let p = store.root().join("store-id");
    if let Ok(s) = std::fs::read_to_string(&p) {
        let s = s.trim();
        if !s.is_empty() {
            return Ok(s.to_string());
        }
    }
    let id = revl_core::util::new_id();
    revl_core::util::write_durable(&p, id.as_bytes()).map_err(|e| Error::io(p.display(), e))?;
    Ok(id)
}

/// Where this store keeps what it knows of remote `name` (mirrors, pending remote forks).
pub fn remote_dir(store: &Store, name: &str) -> PathBuf {
    store.root().join("remotes").join(name)
}
