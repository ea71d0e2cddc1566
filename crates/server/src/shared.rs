//! What the daemons of a fleet share besides sessions: who a person is and what they may spend
//! must not depend on the node a request reaches. On a database several daemons share
//! (`serve --database-url`), the named tokens, the link key, the Web Push key and
//! subscriptions and the daily budgets are documents in it ([`switchboard_store::Documents`]),
//! not files of one node's data directory; a daemon of its own keeps them in files, as before.
//!
//! A [`SharedDoc`] holds a document's value in memory for the readers on the request path,
//! changes it by compare-and-set (a change that finds another node's change first is redone
//! on top of it, so none is lost), and reads it again every [`REFRESH`] so that a change made
//! through another node (a new token, a revoke, a raised limit, what its sessions spent) holds
//! here within that time.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use switchboard_store::{Document, Documents};
use tokio::sync::watch;

/// How often a node reads the shared documents again for other nodes' changes.
pub const REFRESH: Duration = Duration::from_secs(1);

/// The largest shared document read (as the files they replace).
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// One shared document, its value as last read or written here, and its version.
pub struct SharedDoc<T> {
    store: Arc<dyn Documents>,
    name: &'static str,
    current: watch::Sender<(T, u64)>,
}

impl<T> std::fmt::Debug for SharedDoc<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value: some are secrets.
        f.debug_struct("SharedDoc").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> SharedDoc<T> {
    /// Document `name` as the store holds it; where it was never written, `seed()` becomes its
    /// first version (this node's own file, say), unless another node writes it first.
    pub async fn open(
        store: Arc<dyn Documents>,
        name: &'static str,
        seed: impl FnOnce() -> Result<T, String>,
    ) -> Result<Arc<SharedDoc<T>>, String> {
        let mut seed = Some(seed);
        loop {
            if let Some(document) = read(&*store, name).await? {
                let value = parse(name, &document)?;
                let current = watch::channel((value, document.version)).0;
                return Ok(Arc::new(SharedDoc { store, name, current }));
            }
            let Some(seed) = seed.take() else {
                return Err(format!("the shared {name} was written, then vanished"));
            };
            let value = seed()?;
            let text = text(name, &value)?;
            if put(&*store, name, &text, 0).await? {
                let current = watch::channel((value, 1)).0;
                return Ok(Arc::new(SharedDoc { store, name, current }));
            }
            // Another node wrote it first: its value is the fleet's.
        }
    }

    /// The value as last read or written here.
    pub fn get(&self) -> T {
        self.current.borrow().0.clone()
    }

    /// Told each time the value changes (here, or read from another node's change).
    pub fn watch(&self) -> watch::Receiver<(T, u64)> {
        self.current.subscribe()
    }

    /// Changes the value with `change` from the store's latest version, written only from
    /// that version: when another node wrote first, `change` runs again on what it wrote. A
    /// change that leaves the text as it was writes nothing.
    /// `change`'s own refusal is returned as is, and nothing is written.
    pub async fn update<R>(
        &self,
        mut change: impl FnMut(&mut T) -> Result<R, String>,
    ) -> Result<R, String> {
        loop {
            let Some(document) = read(&*self.store, self.name).await? else {
                return Err(format!("the shared {} is gone from the database", self.name));
            };
            let mut value = parse(self.name, &document)?;
            let answer = change(&mut value)?;
            let text = text(self.name, &value)?;
            if text == document.text {
                // Nothing changed: nothing is written, and no node is woken.
                self.current.send_if_modified(|current| {
                    let newer = document.version > current.1;
                    if newer {
                        *current = (value, document.version);
                    }
                    newer
                });
                return Ok(answer);
            }
            if put(&*self.store, self.name, &text, document.version).await? {
                self.current.send_replace((value, document.version + 1));
                return Ok(answer);
            }
        }
    }

    /// Reads the document again; whether another node had changed it.
    pub async fn refresh(&self) -> Result<bool, String> {
        let Some(document) = read(&*self.store, self.name).await? else { return Ok(false) };
        if document.version == self.current.borrow().1 {
            return Ok(false);
        }
        let value = parse(self.name, &document)?;
        self.current.send_if_modified(|current| {
            // Never back to an older version a slower read returned.
            let newer = document.version > current.1;
            if newer {
                *current = (value, document.version);
            }
            newer
        });
        Ok(true)
    }

    /// Reads the document again every [`REFRESH`] while it is held anywhere.
    pub fn follow(self: &Arc<Self>) {
        let weak: Weak<SharedDoc<T>> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut told = false;
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(doc) = weak.upgrade() else { return };
                match doc.refresh().await {
                    Ok(_) => told = false,
                    Err(error) if !told => {
                        told = true;
                        tracing::warn!(document = doc.name, %error, "cannot read a shared document; other nodes' changes wait");
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

/// A key every node signs with (the link key, the Web Push key; hex): the shared one, or this
/// node's own `local` key made the fleet's where none is shared yet.
pub async fn key(
    store: Arc<dyn Documents>,
    name: &'static str,
    local: String,
) -> Result<String, String> {
    Ok(SharedDoc::open(store, name, || Ok(local)).await?.get())
}

async fn read(store: &dyn Documents, name: &str) -> Result<Option<Document>, String> {
    let document = store
        .document(name)
        .await
        .map_err(|error| format!("cannot read the shared {name}: {error}"))?;
    match document {
        Some(document) if document.text.len() > MAX_DOCUMENT_BYTES => Err(format!(
            "the shared {name} is {} bytes, more than the {MAX_DOCUMENT_BYTES} read",
            document.text.len()
        )),
        other => Ok(other),
    }
}

async fn put(store: &dyn Documents, name: &str, text: &str, version: u64) -> Result<bool, String> {
    store
        .put_document(name, text, version)
        .await
        .map_err(|error| format!("cannot write the shared {name}: {error}"))
}

fn parse<T: DeserializeOwned>(name: &str, document: &Document) -> Result<T, String> {
    serde_json::from_str(&document.text)
        .map_err(|error| format!("the shared {name} is unreadable: {error}"))
}

fn text<T: Serialize>(name: &str, value: &T) -> Result<String, String> {
    let text = serde_json::to_string(value)
        .map_err(|error| format!("the shared {name} cannot be written: {error}"))?;
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(format!("the shared {name} would be more than {MAX_DOCUMENT_BYTES} bytes"));
    }
    Ok(text)
}

/// Documents kept as files of one daemon's data directory (`NAME.json`, private to its user),
/// for what a fleet keeps in its database: one process holds the directory (its lock), and one
/// lock here is held across a read and its version, and across a check, a write and the version
/// it makes, so the compare and set is exact. Each write is a new file renamed over the old: a
/// crash leaves one or the other, never half of either.
#[derive(Debug)]
pub struct FileDocuments {
    dir: std::path::PathBuf,
    versions: tokio::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl FileDocuments {
    /// Documents in `dir`.
    pub fn new(dir: impl Into<std::path::PathBuf>) -> FileDocuments {
        FileDocuments { dir: dir.into(), versions: Default::default() }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(format!("{name}.json"))
    }
}

fn file_error(what: String) -> switchboard_store::StoreError {
    switchboard_store::StoreError::Database(what)
}

#[async_trait::async_trait]
impl Documents for FileDocuments {
    async fn document(
        &self,
        name: &str,
    ) -> Result<Option<Document>, switchboard_store::StoreError> {
        let mut versions = self.versions.lock().await;
        let path = self.path(name);
        let shown = path.display().to_string();
        let read = tokio::task::spawn_blocking(move || {
            crate::files::read_bounded(&path, MAX_DOCUMENT_BYTES as u64 + 1)
        })
        .await
        .map_err(|error| file_error(error.to_string()))?;
        match read {
            Ok(text) => {
                let version = *versions.entry(name.to_owned()).or_insert(1);
                Ok(Some(Document { text, version }))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(file_error(format!("cannot read {shown}: {error}"))),
        }
    }

    async fn put_document(
        &self,
        name: &str,
        text: &str,
        version: u64,
    ) -> Result<bool, switchboard_store::StoreError> {
        let mut versions = self.versions.lock().await;
        if versions.get(name).copied().unwrap_or(0) != version {
            return Ok(false);
        }
        let (dir, path, text) = (self.dir.clone(), self.path(name), text.to_owned());
        tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
            crate::files::replace_private(&path, &text)
        })
        .await
        .map_err(|error| file_error(error.to_string()))?
        .map_err(|error| file_error(format!("cannot write {name}: {error}")))?;
        versions.insert(name.to_owned(), version + 1);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn two_nodes_change_one_document_and_lose_nothing() {
        let store: Arc<dyn Documents> = Arc::new(switchboard_store::MemoryStore::new());
        let a = SharedDoc::<Vec<String>>::open(store.clone(), "list", || Ok(vec!["a0".into()]))
            .await
            .unwrap();
        // B finds A's seed, not its own.
        let b = SharedDoc::<Vec<String>>::open(store.clone(), "list", || Ok(vec!["b0".into()]))
            .await
            .unwrap();
        assert_eq!(b.get(), ["a0"]);
        a.update(|list| {
            list.push("a1".into());
            Ok(())
        })
        .await
        .unwrap();
        // B has not read A's change, yet its change lands on top of it.
        assert_eq!(b.get(), ["a0"]);
        b.update(|list| {
            list.push("b1".into());
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(b.get(), ["a0", "a1", "b1"]);
        assert!(a.refresh().await.unwrap(), "A hears of B's change");
        assert_eq!(a.get(), ["a0", "a1", "b1"]);
        assert!(!a.refresh().await.unwrap(), "nothing new");
        // A refusal writes nothing, nor does a change that changes nothing.
        let refused = a.update(|_| Err::<(), _>("no".to_owned())).await;
        assert_eq!(refused, Err("no".to_owned()));
        a.update(|list| {
            list.sort();
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(store.document("list").await.unwrap().unwrap().version, 3);
        // A document nobody can read stops a start, with its name.
        store.put_document("bad", "{not json", 0).await.unwrap();
        let error =
            SharedDoc::<Vec<String>>::open(store.clone(), "bad", || Ok(vec![])).await.unwrap_err();
        assert!(error.contains("shared bad is unreadable"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_document_loses_no_change_of_writers_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Documents> = Arc::new(FileDocuments::new(dir.path().join("data")));
        let doc = SharedDoc::<Vec<u32>>::open(store.clone(), "list", || Ok(vec![])).await.unwrap();
        let writers: Vec<_> = (0..40)
            .map(|n| {
                let doc = doc.clone();
                tokio::spawn(async move {
                    doc.update(|list| {
                        list.push(n);
                        Ok(())
                    })
                    .await
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        let mut list: Vec<u32> = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("data/list.json")).unwrap(),
        )
        .unwrap();
        list.sort_unstable();
        assert_eq!(list, (0..40).collect::<Vec<_>>(), "every writer's change is in the file");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("data/list.json")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_key_is_the_first_nodes() {
        let store: Arc<dyn Documents> = Arc::new(switchboard_store::MemoryStore::new());
        assert_eq!(key(store.clone(), "link-key", "aa".into()).await.unwrap(), "aa");
        assert_eq!(key(store.clone(), "link-key", "bb".into()).await.unwrap(), "aa");
    }
}
