//! The task log's files: records framed with their length and CRC, segments appended to, and
//! snapshots written whole and renamed into place.
//!
//! ```text
//! record   = len: u32 LE | crc32(payload): u32 LE | payload (JSON, `len` bytes)
//! seg-N    = record*   (appended; the last one may end in a torn record after a crash)
//! snap-N   = Task* End (every task as it was after all records of the segments before N)
//! ```

use super::Record;
use crate::store::StoreError;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Records larger than this are not records: a length read from a torn tail.
const MAX_RECORD: u32 = 256 << 20;

pub fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("seg-{n:010}.log"))
}

pub fn snapshot_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("snap-{n:010}.snap"))
}

/// Append one framed record to `buf`.
pub fn frame(buf: &mut Vec<u8>, record: &impl serde::Serialize) -> Result<(), StoreError> {
    let start = buf.len();
    buf.extend_from_slice(&[0; 8]);
    serde_json::to_writer(&mut *buf, record).map_err(|e| StoreError::Io(e.to_string()))?;
    let payload = &buf[start + 8..];
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= MAX_RECORD)
        .ok_or_else(|| StoreError::Io(format!("a record of {} bytes", payload.len())))?;
    let crc = crc32fast::hash(payload);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// How reading a file of records ended.
pub enum Tail {
    /// At the end of the file.
    Clean,
    /// At a record that is incomplete or fails its CRC, at this offset: a write the crash cut.
    Torn { offset: u64, why: String },
}

/// Read every record of `path` in order, handing each to `each` with its offset.
pub fn read_records(
    path: &Path,
    mut each: impl FnMut(Record, u64) -> Result<(), StoreError>,
) -> Result<Tail, StoreError> {
    let file = File::open(path).map_err(|e| io_at(path, e))?;
    let size = file.metadata().map_err(|e| io_at(path, e))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut offset = 0u64;
    let mut payload = Vec::new();
    loop {
        if offset == size {
            return Ok(Tail::Clean);
        }
        let torn = |why: String| Ok(Tail::Torn { offset, why });
        if size - offset < 8 {
            return torn(format!("{} bytes of a record header", size - offset));
        }
        let mut head = [0u8; 8];
        r.read_exact(&mut head).map_err(|e| io_at(path, e))?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > MAX_RECORD || u64::from(len) > size - offset - 8 {
            return torn(format!("a record of {len} bytes past the end"));
        }
        payload.resize(len as usize, 0);
        r.read_exact(&mut payload).map_err(|e| io_at(path, e))?;
        if crc32fast::hash(&payload) != crc {
            return torn("a record whose checksum does not match".into());
        }
        let record: Record = serde_json::from_slice(&payload).map_err(|e| StoreError::Corrupt {
            task: format!("{} at byte {offset}", path.display()),
            message: e.to_string(),
        })?;
        each(record, offset)?;
        offset += 8 + u64::from(len);
    }
}

/// Cut a torn tail off the last segment, so appends continue after its last whole record.
pub fn truncate(path: &Path, offset: u64) -> Result<(), StoreError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_at(path, e))?;
    f.set_len(offset).map_err(|e| io_at(path, e))?;
    f.sync_all().map_err(|e| io_at(path, e))
}

/// Open a segment for appending (created if missing), positioned at its end.
pub fn open_segment(path: &Path) -> Result<File, StoreError> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_at(path, e))?;
    f.seek(SeekFrom::End(0)).map_err(|e| io_at(path, e))?;
    Ok(f)
}

/// Make a file's creation, rename or removal in `dir` survive a crash.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_at(dir, e))
}

/// Write `bytes` as the file `path`, atomically: a temporary file, synced, renamed into place.
pub fn write_atomically(
    dir: &Path,
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(|e| io_at(&tmp, e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| io_at(&tmp, e.into_error()))?;
    file.sync_all().map_err(|e| io_at(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_at(path, e))?;
    sync_dir(dir)
}

/// Numbered files of the log directory: segments and snapshots, each in order.
#[derive(Default)]
pub struct Listing {
    pub segments: Vec<u64>,
    pub snapshots: Vec<u64>,
    pub temporary: Vec<PathBuf>,
}

pub fn list(dir: &Path) -> Result<Listing, StoreError> {
    let mut out = Listing::default();
    for entry in std::fs::read_dir(dir).map_err(|e| io_at(dir, e))? {
        let entry = entry.map_err(|e| io_at(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let number = |prefix: &str, suffix: &str| {
            name.strip_prefix(prefix)
                .and_then(|n| n.strip_suffix(suffix))
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(n) = number("seg-", ".log") {
            out.segments.push(n);
        } else if let Some(n) = number("snap-", ".snap") {
            out.snapshots.push(n);
        } else if name.ends_with(".tmp") {
            out.temporary.push(entry.path());
        }
    }
    out.segments.sort_unstable();
    out.snapshots.sort_unstable();
    Ok(out)
}

pub fn io_at(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_is_found_where_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg-0000000000.log");
        let mut buf = Vec::new();
        for root in ["a", "b"] {
            frame(
                &mut buf,
                &Record::Delete {
                    root: root.to_string(),
                },
            )
            .unwrap();
        }
        let whole = buf.len() as u64;
        frame(&mut buf, &Record::Delete { root: "c".into() }).unwrap();
        // The crash cut the third record short.
        buf.truncate(buf.len() - 3);
        std::fs::write(&path, &buf).unwrap();
        let mut seen = Vec::new();
        let tail = read_records(&path, |r, _| {
            if let Record::Delete { root } = r {
                seen.push(root);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["a", "b"]);
        assert!(matches!(tail, Tail::Torn { offset, .. } if offset == whole));

        // A flipped byte inside a record is torn too, from that record on.
        let mut bad = buf[..whole as usize].to_vec();
        bad[10] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let tail = read_records(&path, |_, _| Ok(())).unwrap();
        assert!(matches!(tail, Tail::Torn { offset: 0, .. }));
    }
}
