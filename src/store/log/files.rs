//! The task log's files: records framed with their length and CRC, written in compressed
//! batches; segments appended to, snapshots written whole and renamed into place.
//!
//! ```text
//! file     = MAGIC batch*
//! batch    = len: u32 LE | crc32(data): u32 LE | raw_len: u32 LE | data (`len` bytes)
//!            data = LZ4 block of `raw_len` bytes: records, compressed against the last 64 KB
//!            of the file's records before it (its dictionary)
//! record   = len: u32 LE | crc32(payload): u32 LE | payload (JSON, `len` bytes)
//! seg-N    = commits appended, one batch per group commit; the last batch may be torn by a crash
//! snap-N   = every task as it was after all records of the segments before N, then an end record
//! ```
//!
//! One event's record is mostly what the events before it were (the same failure, the same
//! field names), so against its predecessors it compresses to a few dozen bytes: the dictionary
//! is what keeps a small group commit small on disk.

use super::Record;
use crate::store::StoreError;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Records (and batches) larger than this are not: a length read from a torn tail.
const MAX_RECORD: u32 = 256 << 20;
/// The start of every segment and snapshot: the format's name and version.
pub const MAGIC: [u8; 8] = *b"LGTLOG\0\x01";
/// How much of the records before a batch its compression may refer to (LZ4's window).
const DICTIONARY: usize = 64 << 10;

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

/// The records written to one file so far, as the next batch's dictionary.
#[derive(Default)]
pub struct History {
    raw: Vec<u8>,
}

impl History {
    fn dictionary(&self) -> &[u8] {
        &self.raw[self.raw.len().saturating_sub(DICTIONARY)..]
    }

    fn push(&mut self, records: &[u8]) {
        self.raw.extend_from_slice(records);
        // Keep between one and two windows: trimmed now and then, not per batch.
        if self.raw.len() > 2 * DICTIONARY {
            self.raw.drain(..self.raw.len() - DICTIONARY);
        }
    }
}

/// Append to `out` one batch holding `records` (framed records), compressed against `history`,
/// which then includes them.
pub fn encode_batch(
    history: &mut History,
    records: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let start = out.len();
    let bound = lz4_flex::block::get_maximum_output_size(records.len());
    out.resize(start + 12 + bound, 0);
    let len = lz4_flex::block::compress_into_with_dict(
        records,
        &mut out[start + 12..],
        history.dictionary(),
    )
    .map_err(|e| StoreError::Io(format!("compressing a task log batch: {e}")))?;
    out.truncate(start + 12 + len);
    let (len, raw_len) = match (u32::try_from(len), u32::try_from(records.len())) {
        (Ok(l), Ok(r)) if l <= MAX_RECORD && r <= MAX_RECORD => (l, r),
        _ => {
            return Err(StoreError::Io(format!(
                "a batch of {} bytes",
                records.len()
            )))
        }
    };
    let crc = crc32fast::hash(&out[start + 12..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&raw_len.to_le_bytes());
    history.push(records);
    Ok(())
}

/// How reading a file of records ended.
pub enum Tail {
    /// At the end of the file.
    Clean,
    /// At a batch that is incomplete or fails its CRC, at this offset: a write the crash cut.
    Torn { offset: u64, why: String },
}

/// What reading a file found: how it ended, and its records' history (a segment appended to
/// after recovery compresses its next batch against it).
pub struct Replayed {
    pub tail: Tail,
    pub history: History,
}

/// Read every record of `path` in order, handing each to `each` with the offset of its batch.
pub fn read_records(
    path: &Path,
    mut each: impl FnMut(Record, u64) -> Result<(), StoreError>,
) -> Result<Replayed, StoreError> {
    let file = File::open(path).map_err(|e| io_at(path, e))?;
    let size = file.metadata().map_err(|e| io_at(path, e))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut history = History::default();
    let done = |tail, history| Ok(Replayed { tail, history });
    if size < MAGIC.len() as u64 {
        // Created, and the crash came before its first write: nothing was acknowledged in it.
        let why = format!("{size} bytes of a file header");
        return done(Tail::Torn { offset: 0, why }, history);
    }
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(|e| io_at(path, e))?;
    if magic != MAGIC {
        return Err(if magic[..7] == MAGIC[..7] {
            StoreError::Version {
                found: u32::from(magic[7]),
                supported: u32::from(MAGIC[7]),
            }
        } else {
            StoreError::Corrupt {
                task: path.display().to_string(),
                message: "not a loopguard task log file".into(),
            }
        });
    }
    let mut offset = MAGIC.len() as u64;
    let mut data = Vec::new();
    let mut raw = Vec::new();
    loop {
        if offset == size {
            return done(Tail::Clean, history);
        }
        let torn = |why: String, history| done(Tail::Torn { offset, why }, history);
        if size - offset < 12 {
            return torn(
                format!("{} bytes of a batch header", size - offset),
                history,
            );
        }
        let mut head = [0u8; 12];
        r.read_exact(&mut head).map_err(|e| io_at(path, e))?;
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (len, crc, raw_len) = (word(0), word(4), word(8));
        if len > MAX_RECORD || raw_len > MAX_RECORD || u64::from(len) > size - offset - 12 {
            return torn(format!("a batch of {len} bytes past the end"), history);
        }
        data.resize(len as usize, 0);
        r.read_exact(&mut data).map_err(|e| io_at(path, e))?;
        if crc32fast::hash(&data) != crc {
            return torn("a batch whose checksum does not match".into(), history);
        }
        let corrupt = |message: String| StoreError::Corrupt {
            task: format!("{} at byte {offset}", path.display()),
            message,
        };
        raw.resize(raw_len as usize, 0);
        let n = lz4_flex::block::decompress_into_with_dict(&data, &mut raw, history.dictionary())
            .map_err(|e| corrupt(format!("a batch that does not decompress: {e}")))?;
        if n != raw.len() {
            return Err(corrupt(format!(
                "a batch of {n} bytes where {raw_len} were written"
            )));
        }
        let mut at = 0usize;
        while at < raw.len() {
            let rest = &raw[at..];
            if rest.len() < 8 {
                return Err(corrupt("a record cut inside its batch".into()));
            }
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
            let payload = rest
                .get(8..8 + len)
                .ok_or_else(|| corrupt("a record cut inside its batch".into()))?;
            if crc32fast::hash(payload) != crc {
                return Err(corrupt("a record whose checksum does not match".into()));
            }
            let record: Record =
                serde_json::from_slice(payload).map_err(|e| corrupt(e.to_string()))?;
            each(record, offset)?;
            at += 8 + len;
        }
        history.push(&raw);
        offset += 12 + u64::from(len);
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

/// Open a segment for appending (created with its header if missing or empty), at its end.
pub fn open_segment(path: &Path) -> Result<File, StoreError> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_at(path, e))?;
    let end = f.seek(SeekFrom::End(0)).map_err(|e| io_at(path, e))?;
    if end == 0 {
        f.write_all(&MAGIC)
            .and_then(|()| f.sync_data())
            .map_err(|e| io_at(path, e))?;
    }
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
    w.write_all(&MAGIC).map_err(|e| io_at(&tmp, e))?;
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

    fn delete(root: &str) -> Vec<u8> {
        let mut buf = Vec::new();
        frame(&mut buf, &Record::Delete { root: root.into() }).unwrap();
        buf
    }

    #[test]
    fn a_torn_tail_is_found_where_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg-0000000000.log");
        let mut history = History::default();
        let mut file = MAGIC.to_vec();
        for batch in [delete("a"), [delete("b"), delete("c")].concat()] {
            encode_batch(&mut history, &batch, &mut file).unwrap();
        }
        let whole = file.len() as u64;
        encode_batch(&mut history, &delete("d"), &mut file).unwrap();
        // The crash cut the third batch short.
        file.truncate(file.len() - 3);
        std::fs::write(&path, &file).unwrap();
        let mut seen = Vec::new();
        let read = read_records(&path, |r, _| {
            if let Record::Delete { root } = r {
                seen.push(root);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["a", "b", "c"]);
        assert!(matches!(read.tail, Tail::Torn { offset, .. } if offset == whole));

        // A flipped byte inside a batch is torn too, from that batch on.
        let mut bad = file[..whole as usize].to_vec();
        bad[MAGIC.len() + 13] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let read = read_records(&path, |_, _| Ok(())).unwrap();
        assert!(matches!(read.tail, Tail::Torn { offset: 8, .. }));
    }

    #[test]
    fn repeated_records_compress_against_the_ones_before() {
        let mut history = History::default();
        let mut out = Vec::new();
        let record = delete("a task whose id is long enough to be worth compressing");
        encode_batch(&mut history, &record, &mut out).unwrap();
        let first = out.len();
        out.clear();
        encode_batch(&mut history, &record, &mut out).unwrap();
        assert!(out.len() < first / 2, "{} then {}", first, out.len());
    }

    #[test]
    fn a_file_of_another_format_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg-0000000000.log");
        let mut newer = MAGIC;
        newer[7] += 1;
        std::fs::write(&path, newer).unwrap();
        let err = read_records(&path, |_, _| Ok(())).err().unwrap();
        assert!(matches!(err, StoreError::Version { .. }), "{err}");
        std::fs::write(&path, b"something else").unwrap();
        let err = read_records(&path, |_, _| Ok(())).err().unwrap();
        assert!(
            err.to_string().contains("not a loopguard task log"),
            "{err}"
        );
    }
}
