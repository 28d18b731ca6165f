//! The embedding cache on disk: vectors the model computed in one batch command (`eval`,
//! `score`, `calibrate`) answer the same texts in the next, so re-running an evaluation after a
//! change of settings pays the model only for texts it has never seen.
//!
//! Layout: `<root>/<fingerprint>/*.lgvec`. The fingerprint hashes the model file, the tokenizer
//! and `max_tokens`, so a vector is only ever reused by the model that made it. Each process
//! writes its new vectors as a segment of its own (written to a temporary name, then renamed), so
//! concurrent commands never share a file and need no lock; a process that finds many segments
//! merges them. A segment that fails its checksum is skipped and deleted: the cache can only
//! make a command faster, never fail it or change its answers.

use super::{Vector, DIM};
use crate::config::ModelConfig;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: &[u8; 8] = b"LGVEC\x001\n";
const EXT: &str = "lgvec";
/// Bytes of the text's SHA-256 kept as its key: a collision among a billion texts has a
/// probability near 1e-21.
const KEY_BYTES: usize = 16;
const ENTRY_BYTES: usize = KEY_BYTES + DIM * 4;
const HEADER_BYTES: usize = MAGIC.len() + 8;
/// New vectors written as a segment once this many wait (about 12 MiB).
const FLUSH_EVERY: usize = 8192;
/// More segments than this at start-up are merged into one.
const MERGE_ABOVE: usize = 16;

pub type Key = [u8; KEY_BYTES];

pub fn key(text: &str) -> Key {
    let digest = Sha256::digest(text.as_bytes());
    let mut k = [0u8; KEY_BYTES];
    k.copy_from_slice(&digest[..KEY_BYTES]);
    k
}

/// What the cache did, for the command's summary.
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Vectors held at start.
    pub loaded: u64,
    /// Vectors written by this command.
    pub written: u64,
}

pub struct DiskCache {
    dir: PathBuf,
    vectors: HashMap<Key, Vector>,
    pending: Vec<(Key, Vector)>,
    /// Most bytes the cache keeps on disk (and so in memory).
    max_bytes: u64,
    /// Set after a failed write: a full or read-only disk costs one warning, not one per batch.
    broken: bool,
    pub stats: DiskStats,
}

impl DiskCache {
    /// The directory of `model`'s vectors under `root`.
    pub fn dir_for(root: &Path, model: &ModelConfig) -> PathBuf {
        root.join(fingerprint(model))
    }

    /// Open (creating) the cache in `dir` (see [`DiskCache::dir_for`]) and load what it holds,
    /// newest segments first, up to `max_bytes`; older segments past the bound are deleted.
    /// Never fails: a cache that cannot be opened is reported and the command runs without it.
    pub fn open(dir: &Path, max_bytes: u64) -> Option<DiskCache> {
        let dir = dir.to_path_buf();
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "embedding cache on disk not used");
            return None;
        }
        let mut cache = DiskCache {
            dir,
            vectors: HashMap::new(),
            pending: Vec::new(),
            max_bytes,
            broken: false,
            stats: DiskStats::default(),
        };
        cache.load();
        Some(cache)
    }

    fn segments(&self) -> Vec<(std::time::SystemTime, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        // A command killed mid-write leaves its temporary file; an hour on, nobody is writing it.
        for p in paths
            .iter()
            .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
        {
            let stale = std::fs::metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(3600));
            if stale {
                let _ = std::fs::remove_file(p);
            }
        }
        let mut found: Vec<_> = paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == EXT))
            .filter_map(|p| {
                let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
                Some((modified, p))
            })
            .collect();
        // Newest first: under the size bound, the vectors of recent commands are the ones kept.
        found.sort_by(|a, b| b.cmp(a));
        found
    }

    fn load(&mut self) {
        let segments = self.segments();
        let mut bytes = 0u64;
        let mut read = Vec::new();
        for (_, path) in &segments {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            if bytes + size > self.max_bytes {
                // Past the bound: the oldest vectors go.
                let _ = std::fs::remove_file(path);
                continue;
            }
            match read_segment(path) {
                Ok(entries) => {
                    bytes += size;
                    for (k, v) in entries {
                        self.vectors.entry(k).or_insert(v);
                    }
                    read.push(path.clone());
                }
                Err(SegmentError::Gone) => {}
                Err(SegmentError::Bad(why)) => {
                    tracing::warn!(segment = %path.display(), why, "embedding cache segment skipped and removed");
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        self.stats.loaded = self.vectors.len() as u64;
        if read.len() > MERGE_ABOVE {
            let all: Vec<(Key, Vector)> = self
                .vectors
                .iter()
                .map(|(k, v)| (*k, Vector::clone(v)))
                .collect();
            if self.write_segment(&all).is_ok() {
                for p in read {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
    }

    pub fn get(&self, text: &str) -> Option<Vector> {
        self.vectors.get(&key(text)).cloned()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Remember a vector the model just computed; written with the next segment.
    pub fn put(&mut self, text: &str, vector: &Vector) {
        if vector.len() != DIM {
            return;
        }
        let k = key(text);
        if self.vectors.insert(k, Vector::clone(vector)).is_none() {
            self.pending.push((k, Vector::clone(vector)));
        }
        if self.pending.len() >= FLUSH_EVERY {
            self.persist();
        }
    }

    /// Write the vectors not yet on disk as one segment.
    pub fn persist(&mut self) {
        if self.pending.is_empty() || self.broken {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        match self.write_segment(&pending) {
            Ok(()) => self.stats.written += pending.len() as u64,
            Err(e) => {
                self.broken = true;
                tracing::warn!(dir = %self.dir.display(), error = %e, "embedding cache on disk: write failed; not writing more this run");
            }
        }
    }

    fn write_segment(&self, entries: &[(Key, Vector)]) -> std::io::Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "{nanos}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = self.dir.join(format!("{name}.tmp"));
        let path = self.dir.join(format!("{name}.{EXT}"));
        let mut body = Vec::with_capacity(HEADER_BYTES + entries.len() * ENTRY_BYTES + 4);
        body.extend_from_slice(MAGIC);
        body.extend_from_slice(&(DIM as u32).to_le_bytes());
        body.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (k, v) in entries {
            body.extend_from_slice(k);
            for x in v.iter() {
                body.extend_from_slice(&x.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(&body));
        if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }
}

enum SegmentError {
    /// Deleted by another process between listing and reading (it merged the segments).
    Gone,
    Bad(String),
}

fn read_segment(path: &Path) -> Result<Vec<(Key, Vector)>, SegmentError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SegmentError::Gone,
            _ => SegmentError::Bad(e.to_string()),
        })?;
    let bad = |why: &str| SegmentError::Bad(why.to_string());
    if bytes.len() < HEADER_BYTES + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not an embedding cache segment"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(bad("checksum mismatch"));
    }
    let word = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let (dim, count) = (word(MAGIC.len()) as usize, word(MAGIC.len() + 4) as usize);
    if dim != DIM || body.len() != HEADER_BYTES + count * ENTRY_BYTES {
        return Err(bad("wrong dimension or length"));
    }
    Ok(body[HEADER_BYTES..]
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            let mut k = [0u8; KEY_BYTES];
            k.copy_from_slice(&e[..KEY_BYTES]);
            let v: Vec<f32> = e[KEY_BYTES..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect();
            (k, Vector::from(v))
        })
        .collect())
}

/// Which model made a vector: the model and tokenizer files, the token limit and the pooling.
/// Another model, another tokenizer or another `max_tokens` is another directory.
fn fingerprint(model: &ModelConfig) -> String {
    let mut h = Sha256::new();
    h.update(b"loopguard embedding cache 1; mean pooling, L2-normalised\n");
    h.update(format!("{:?} max_tokens={}\n", model.source, model.max_tokens).as_bytes());
    let dir = model.resolved_dir();
    for name in ["model.onnx", "tokenizer.json"] {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => h.update(Sha256::digest(&bytes)),
            Err(_) => h.update(format!("no {name} in {}", dir.display()).as_bytes()),
        }
    }
    hex::encode(&h.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(seed: f32) -> Vector {
        let v: Vec<f32> = (0..DIM).map(|i| (i as f32 * seed).sin()).collect();
        Vector::from(v)
    }

    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn vectors_written_by_one_command_answer_the_next_bit_for_bit() {
        let tmp = tempfile::tempdir().unwrap();
        let mut first = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        assert!(first.is_empty());
        first.put("ls -la", &vector(0.1));
        first.put("pytest -x", &vector(0.2));
        // The same text twice is stored once.
        first.put("ls -la", &vector(0.1));
        first.persist();
        assert_eq!(first.stats.written, 2);
        // Nothing new: no empty segment.
        first.persist();
        assert_eq!(segment_files(tmp.path()).len(), 1);

        let second = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        assert_eq!(second.len(), 2);
        assert_eq!(second.get("pytest -x").unwrap()[..], vector(0.2)[..]);
        assert_eq!(second.get("ls -la").unwrap()[..], vector(0.1)[..]);
        assert!(second.get("ls").is_none());
    }

    #[test]
    fn a_damaged_segment_is_skipped_and_removed_and_the_rest_still_answer() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        a.put("kept", &vector(0.3));
        a.persist();
        a.put("damaged", &vector(0.4));
        a.persist();
        let files = segment_files(tmp.path());
        assert_eq!(files.len(), 2);
        // Flip one byte of a vector in the second segment: its checksum no longer holds.
        let damaged = files
            .iter()
            .find(|p| {
                read_segment(p)
                    .ok()
                    .is_some_and(|e| e[0].0 == key("damaged"))
            })
            .unwrap()
            .clone();
        let mut bytes = std::fs::read(&damaged).unwrap();
        bytes[HEADER_BYTES + KEY_BYTES + 7] ^= 0x40;
        std::fs::write(&damaged, &bytes).unwrap();
        // A truncated segment (a disk that filled mid-write) and a stranger file.
        let truncated = tmp.path().join("0-0-0.lgvec");
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "not a segment").unwrap();

        let b = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        assert_eq!(b.len(), 1);
        assert!(b.get("kept").is_some());
        assert!(b.get("damaged").is_none());
        assert!(!damaged.exists() && !truncated.exists());
        assert!(
            tmp.path().join("notes.txt").exists(),
            "only segments are ours to remove"
        );
    }

    #[test]
    fn past_its_size_bound_the_oldest_segments_go() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        for (i, text) in ["oldest", "middle", "newest"].iter().enumerate() {
            a.put(text, &vector(i as f32 + 1.0));
            a.persist();
            // Distinct modification times, whatever the file system's resolution.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let one = std::fs::metadata(&segment_files(tmp.path())[0])
            .unwrap()
            .len();
        let b = DiskCache::open(tmp.path(), 2 * one).unwrap();
        assert!(b.get("newest").is_some() && b.get("middle").is_some());
        assert!(b.get("oldest").is_none());
        assert_eq!(segment_files(tmp.path()).len(), 2);
    }

    #[test]
    fn many_segments_are_merged_into_one() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        for i in 0..MERGE_ABOVE + 2 {
            a.put(&format!("text {i}"), &vector(i as f32));
            a.persist();
        }
        assert_eq!(segment_files(tmp.path()).len(), MERGE_ABOVE + 2);
        let b = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        assert_eq!(b.len(), MERGE_ABOVE + 2);
        assert_eq!(segment_files(tmp.path()).len(), 1);
        let c = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        assert_eq!(c.get("text 5").unwrap()[..], vector(5.0)[..]);
    }

    #[test]
    fn a_cache_that_cannot_be_written_costs_nothing_but_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        // A file where the directory should be: it cannot be created.
        let blocked = tmp.path().join("file");
        std::fs::write(&blocked, "x").unwrap();
        assert!(DiskCache::open(&blocked.join("cache"), 1 << 30).is_none());

        // A directory removed under a running command: the write fails once, then stops trying.
        let dir = tmp.path().join("gone");
        let mut c = DiskCache::open(&dir, 1 << 30).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        c.put("a", &vector(1.0));
        c.persist();
        assert!(c.broken);
        assert_eq!(c.stats.written, 0);
        assert!(
            c.get("a").is_some(),
            "still answers this command from memory"
        );
    }

    #[test]
    fn two_commands_at_once_each_add_their_segment_and_the_next_sees_both() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let mut c = DiskCache::open(&dir, 1 << 30).unwrap();
                    for i in 0..50 {
                        c.put(&format!("{name} {i}"), &vector(i as f32));
                        c.persist();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // 100 segments, merged by the next command to open the cache: nothing lost.
        let next = DiskCache::open(&dir, 1 << 30).unwrap();
        assert_eq!(next.len(), 100);
        assert_eq!(next.get("b 49").unwrap()[..], vector(49.0)[..]);
        assert_eq!(segment_files(&dir).len(), 1);
    }

    #[test]
    fn a_long_command_writes_as_it_goes_not_only_at_its_end() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = DiskCache::open(tmp.path(), 1 << 30).unwrap();
        for i in 0..FLUSH_EVERY {
            c.put(&format!("text {i}"), &vector(1.0));
        }
        // No persist(): a command killed now keeps what it embedded so far.
        assert_eq!(c.stats.written, FLUSH_EVERY as u64);
        assert_eq!(
            DiskCache::open(tmp.path(), 1 << 30).unwrap().len(),
            FLUSH_EVERY
        );
    }

    #[test]
    fn another_model_or_token_limit_is_another_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let base = ModelConfig::default();
        let mut shorter = base.clone();
        shorter.max_tokens = 64;
        let mut elsewhere = base.clone();
        elsewhere.dir = tmp.path().to_path_buf();
        let root = Path::new("/cache");
        let dirs = [&base, &shorter, &elsewhere].map(|m| DiskCache::dir_for(root, m));
        assert_ne!(dirs[0], dirs[1]);
        assert_ne!(dirs[0], dirs[2]);
        assert_eq!(dirs[0], DiskCache::dir_for(root, &base));
    }
}
