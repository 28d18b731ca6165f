//! The task log's files: records framed with their length and CRC, written in compressed
//! batches; segments appended to, snapshots written whole and renamed into place.
//!
//! ```text
//! file     = MAGIC batch*
//! batch    = len: u32 LE | crc32(data): u32 LE | raw_len: u32 LE | data (`len` bytes)
//!            data = LZ4 block of `raw_len` bytes: records, compressed against the last 64 KB
//!            of the file's records before it (its dictionary) — or, when the top bit of
//!            `raw_len` is set (a restart point, every 256 KB of records), against nothing
//! record   = len: u32 LE | crc32(payload): u32 LE | payload (JSON, `len` bytes)
//! seg-N    = commits appended, one batch per group commit; the last batch may be torn by a crash
//! snap-N   = every task as it was after all records of the segments before N, then an end record
//! seg-N.note = a line per batch of seg-N, once synced: where seg-N ends, its records, each
//!            record's task and version (JSON, a tab, its CRC32 in hex); see [`note_path`]
//! MANIFEST = the segments closed since the newest snapshot (length, records) and the one
//!            written now, rewritten at each start and rotation; see [`Manifest`]
//! ```
//!
//! One event's record is mostly what the events before it were (the same failure, the same
//! field names), so against its predecessors it compresses to a few dozen bytes: the dictionary
//! is what keeps a small group commit small on disk.

use crate::store::StoreError;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Records (and batches) larger than this are not: a length read from a torn tail.
const MAX_RECORD: u32 = 256 << 20;
/// The start of every segment: the format's name and version. Version 2 has restart points.
pub const MAGIC: [u8; 8] = *b"LGTLOG\0\x02";
/// Segments, and snapshots, of the first version: one unbroken chain (still read).
pub const MAGIC_V1: [u8; 8] = *b"LGTLOG\0\x01";
/// The start of every page file (snapshots, the spill file): blocks compressed on their own.
pub const PAGE_MAGIC: [u8; 8] = *b"LGTPAGE\x01";
/// The top bit of a batch's `raw_len`: compressed without a dictionary, which restarts here.
const FRESH: u32 = 1 << 31;
/// Records between restart points: damage makes a chain unreadable from the damaged batch on
/// (later batches refer back to its bytes), so a chain is restarted this often, bounding what
/// one bad byte can take with it. It costs one batch compressed without a dictionary.
const RESTART_BYTES: usize = 256 << 10;
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
    /// Record bytes since the last restart point.
    since_restart: usize,
}

impl History {
    fn dictionary(&self) -> &[u8] {
        &self.raw[self.raw.len().saturating_sub(DICTIONARY)..]
    }

    /// A restart point: what came before is no one's dictionary any more.
    fn restart(&mut self) {
        self.raw.clear();
        self.since_restart = 0;
    }

    fn push(&mut self, records: &[u8]) {
        self.since_restart += records.len();
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
    let fresh = history.raw.is_empty() || history.since_restart >= RESTART_BYTES;
    if fresh {
        history.restart();
    }
    let start = out.len();
    compress_into(records, history.dictionary(), out)?;
    if fresh {
        out[start + 11] |= (FRESH >> 24) as u8;
    }
    history.push(records);
    Ok(())
}

/// Append to `out` one block of a page file holding `records`, compressed on its own.
pub fn encode_block(records: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
    compress_into(records, &[], out)
}

fn compress_into(records: &[u8], dictionary: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
    let start = out.len();
    let bound = lz4_flex::block::get_maximum_output_size(records.len());
    out.resize(start + 12 + bound, 0);
    let len = lz4_flex::block::compress_into_with_dict(records, &mut out[start + 12..], dictionary)
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
    Ok(())
}

/// Read the block at `offset` of a page file and decompress it into `raw`.
pub fn read_block(
    file: &File,
    path: &Path,
    offset: u64,
    raw: &mut Vec<u8>,
) -> Result<(), StoreError> {
    use std::os::unix::fs::FileExt;
    let corrupt = |message: String| StoreError::Corrupt {
        task: format!("{} at byte {offset}", path.display()),
        message,
    };
    let mut head = [0u8; 12];
    file.read_exact_at(&mut head, offset)
        .map_err(|e| io_at(path, e))?;
    let (len, crc, raw_len, _) = header(&head);
    if len == 0 || len > MAX_RECORD || raw_len > MAX_RECORD {
        return Err(corrupt(format!("a block header saying {len} bytes")));
    }
    let mut data = vec![0u8; len as usize];
    file.read_exact_at(&mut data, offset + 12)
        .map_err(|e| io_at(path, e))?;
    if crc32fast::hash(&data) != crc {
        return Err(corrupt("a block whose checksum does not match".into()));
    }
    decompress(&data, raw_len, &[], raw).map_err(corrupt)
}

/// How reading a file of records ended.
pub enum Tail {
    /// At the end of the file.
    Clean,
    /// At a batch that is incomplete or fails its CRC, at this offset: a write a crash cut, or
    /// damage ([`find_valid_after`] tells which).
    Torn { offset: u64, why: String },
}

/// What reading a file found: how it ended, and its records' history (a segment appended to
/// after recovery compresses its next batch against it).
pub struct Replayed {
    pub tail: Tail,
    pub history: History,
}

/// Where a record was read: the offset of its batch (or block) and its place in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub batch: u64,
    pub slot: u32,
}

/// How a file's batches are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A segment: each batch against the records before it (a chain read from the start).
    Chained,
    /// A page file (snapshot, spill): each block on its own, so any one can be read alone.
    Blocks,
}

impl Layout {
    fn magic(self) -> [u8; 8] {
        match self {
            Layout::Chained => MAGIC,
            Layout::Blocks => PAGE_MAGIC,
        }
    }
}

/// Read every record of `path` in order, handing each record's payload (checked against its
/// CRC) to `each` with where it was read.
pub fn read_records(
    path: &Path,
    layout: Layout,
    mut each: impl FnMut(&[u8], At) -> Result<(), StoreError>,
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
    check_magic(path, magic, layout.magic())?;
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
        let (len, crc, raw_len, fresh) = header(&head);
        if len == 0
            || len > MAX_RECORD
            || raw_len > MAX_RECORD
            || u64::from(len) > size - offset - 12
        {
            return torn(format!("a batch of {len} bytes past the end"), history);
        }
        data.resize(len as usize, 0);
        r.read_exact(&mut data).map_err(|e| io_at(path, e))?;
        if crc32fast::hash(&data) != crc {
            return torn("a batch whose checksum does not match".into(), history);
        }
        let corrupt = |message: String| StoreError::Damaged {
            file: path.display().to_string(),
            offset,
            message,
        };
        if fresh {
            history.restart();
        }
        let dictionary = match layout {
            Layout::Chained => history.dictionary(),
            Layout::Blocks => &[],
        };
        decompress(&data, raw_len, dictionary, &mut raw).map_err(corrupt)?;
        for_each_record(&raw, |slot, payload| {
            each(
                payload,
                At {
                    batch: offset,
                    slot,
                },
            )
        })
        .map_err(|e| match e {
            RecordError::Bad(why) => corrupt(why),
            RecordError::Caller(e) => e,
        })?;
        if layout == Layout::Chained {
            history.push(&raw);
        }
        offset += 12 + u64::from(len);
    }
}

fn check_magic(path: &Path, found: [u8; 8], want: [u8; 8]) -> Result<(), StoreError> {
    if found == want || (want == MAGIC && found == MAGIC_V1) {
        return Ok(());
    }
    Err(StoreError::Damaged {
        file: path.display().to_string(),
        offset: 0,
        message: if found[..7] == want[..7] {
            format!(
                "format version {}, where this build reads {} here: written by another \
                 version of loopguard, or damaged",
                found[7], want[7]
            )
        } else {
            "not a loopguard task log file of this kind (its header is wrong)".into()
        },
    })
}

/// A batch header: compressed length, CRC of the compressed bytes, raw length, and whether it
/// is a restart point.
fn header(head: &[u8]) -> (u32, u32, u32, bool) {
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    (word(0), word(4), word(8) & !FRESH, word(8) & FRESH != 0)
}

fn decompress(
    data: &[u8],
    raw_len: u32,
    dictionary: &[u8],
    raw: &mut Vec<u8>,
) -> Result<(), String> {
    raw.resize(raw_len as usize, 0);
    let n = lz4_flex::block::decompress_into_with_dict(data, raw, dictionary)
        .map_err(|e| format!("a batch that does not decompress: {e}"))?;
    if n != raw.len() {
        return Err(format!("a batch of {n} bytes where {raw_len} were written"));
    }
    Ok(())
}

enum RecordError {
    Bad(String),
    Caller(StoreError),
}

/// Each framed record of a decompressed batch, checked against its CRC.
fn for_each_record(
    raw: &[u8],
    mut each: impl FnMut(u32, &[u8]) -> Result<(), StoreError>,
) -> Result<(), RecordError> {
    let mut at = 0usize;
    let mut slot = 0u32;
    while at < raw.len() {
        let rest = &raw[at..];
        if rest.len() < 8 {
            return Err(RecordError::Bad("a record cut inside its batch".into()));
        }
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len == 0 {
            // Never written: a record is a JSON object.
            return Err(RecordError::Bad("an empty record".into()));
        }
        let payload = rest
            .get(8..8 + len)
            .ok_or_else(|| RecordError::Bad("a record cut inside its batch".into()))?;
        if crc32fast::hash(payload) != crc {
            return Err(RecordError::Bad(
                "a record whose checksum does not match".into(),
            ));
        }
        each(slot, payload).map_err(RecordError::Caller)?;
        at += 8 + len;
        slot += 1;
    }
    Ok(())
}

/// The payload of the record at `slot` of a decompressed block, checked against its CRC.
pub fn record_at(raw: &[u8], slot: u32) -> Result<&[u8], String> {
    let mut at = 0usize;
    for n in 0..=slot {
        let head = raw
            .get(at..at + 8)
            .ok_or_else(|| format!("no record {slot} in a block of {n}"))?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let payload = raw
            .get(at + 8..at + 8 + len)
            .ok_or_else(|| "a record cut inside its block".to_string())?;
        if n == slot {
            if crc32fast::hash(payload) != crc {
                return Err("a record whose checksum does not match".into());
            }
            return Ok(payload);
        }
        at += 8 + len;
    }
    unreachable!("the loop returns at `slot`")
}

/// Valid batches found after a damaged one: where the first starts, how many follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidAfter {
    pub offset: u64,
    pub batches: u64,
    /// The end of the last of them.
    pub end: u64,
}

/// Look for whole batches after the damaged one at `from`. A crash cuts only the end of what
/// was being written, and a batch is written only once the one before it is synced: a valid
/// batch after a bad one means the bad one is damage, not a torn write. A candidate counts when
/// its checksum matches and it is followed by another that does, or ends the file exactly (a
/// chance match of both is about one in 2^64).
pub fn find_valid_after(path: &Path, from: u64) -> Result<Option<ValidAfter>, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| io_at(path, e))?;
    let size = bytes.len() as u64;
    let batch_at = |at: u64| -> Option<u64> {
        let head = bytes.get(at as usize..at as usize + 12)?;
        let (len, crc, raw_len, _) = header(head);
        if len == 0 || raw_len < 8 || len > MAX_RECORD || raw_len > MAX_RECORD {
            return None;
        }
        let end = at + 12 + u64::from(len);
        let data = bytes.get(at as usize + 12..end as usize)?;
        (crc32fast::hash(data) == crc).then_some(end)
    };
    let mut at = from + 1;
    while at + 12 <= size {
        if let Some(end) = batch_at(at) {
            if end == size || batch_at(end).is_some() {
                let mut batches = 0;
                let mut next = at;
                while let Some(e) = batch_at(next) {
                    batches += 1;
                    next = e;
                }
                return Ok(Some(ValidAfter {
                    offset: at,
                    batches,
                    end: next,
                }));
            }
        }
        at += 1;
    }
    Ok(None)
}

/// A stretch of a file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub offset: u64,
    /// Where reading resumed (the next whole batch), or the file's size.
    pub end: u64,
    pub why: String,
    /// Valid batches follow it (else it is the file's tail).
    pub followed: bool,
}

/// What [`scan`] found in a file.
#[derive(Debug, Default)]
pub struct Scanned {
    pub size: u64,
    pub batches: u64,
    pub records: u64,
    /// Records inside readable batches that failed their own checksum or did not decompress.
    pub records_dropped: u64,
    pub unreadable: Vec<Unreadable>,
}

/// Read every record of `path` that can be read, past any damage: a bad batch is skipped to
/// the next whole one ([`find_valid_after`]'s rule), and a batch compressed against lost bytes
/// is decompressed as far as it can be, keeping the records whose own checksum matches. Each
/// record goes to `each` with whether it is intact (a record failing its checksum is handed
/// over too, so that what it was about can be named). For `loopguard store verify` and
/// `salvage`; the service itself refuses damage.
pub fn scan(
    path: &Path,
    layout: Layout,
    mut each: impl FnMut(&[u8], At, bool),
) -> Result<Scanned, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| io_at(path, e))?;
    let size = bytes.len() as u64;
    let mut out = Scanned {
        size,
        ..Scanned::default()
    };
    if bytes.len() < MAGIC.len() {
        out.unreadable.push(Unreadable {
            offset: 0,
            end: size,
            why: format!("{size} bytes of a file header"),
            followed: false,
        });
        return Ok(out);
    }
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&bytes[..8]);
    if let Err(e) = check_magic(path, magic, layout.magic()) {
        // Read on as if the header were right: a flipped byte there spoils nothing else.
        out.unreadable.push(Unreadable {
            offset: 0,
            end: MAGIC.len() as u64,
            why: e.to_string(),
            followed: size > MAGIC.len() as u64,
        });
    }
    let batch_at = |at: u64| -> Result<(u32, bool, u64), String> {
        let head = bytes
            .get(at as usize..at as usize + 12)
            .ok_or_else(|| format!("{} bytes of a batch header", size - at))?;
        let (len, crc, raw_len, fresh) = header(head);
        if len == 0 || len > MAX_RECORD || raw_len > MAX_RECORD {
            return Err(format!("a batch header saying {len} bytes"));
        }
        let end = at + 12 + u64::from(len);
        let data = bytes
            .get(at as usize + 12..end as usize)
            .ok_or_else(|| format!("a batch of {len} bytes past the end"))?;
        if crc32fast::hash(data) != crc {
            return Err("a batch whose checksum does not match".into());
        }
        Ok((raw_len, fresh, end))
    };
    let mut history = History::default();
    let mut raw = Vec::new();
    let mut at = MAGIC.len() as u64;
    // Decompress one batch as far as it goes and hand out the records that pass their own
    // checksum; the batch's bytes (or zeros in their place) go into the dictionary.
    let mut take = |at: u64,
                    data: &[u8],
                    (raw_len, fresh): (u32, bool),
                    out: &mut Scanned,
                    history: &mut History| {
        if fresh {
            history.restart();
        }
        let dictionary = match layout {
            Layout::Chained => history.dictionary(),
            Layout::Blocks => &[],
        };
        if decompress(data, raw_len, dictionary, &mut raw).is_err() {
            out.records_dropped += 1;
            history.push(&vec![0u8; (raw_len as usize).min(DICTIONARY)]);
            return;
        }
        let mut pos = 0usize;
        let mut slot = 0u32;
        while pos + 8 <= raw.len() {
            let len = u32::from_le_bytes(raw[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(raw[pos + 4..pos + 8].try_into().expect("4 bytes"));
            match raw.get(pos + 8..pos + 8 + len) {
                // An empty record is never written (and is what zeros decode to).
                Some(p) if !p.is_empty() && crc32fast::hash(p) == crc => {
                    out.records += 1;
                    each(p, At { batch: at, slot }, true);
                }
                Some(p) => {
                    out.records_dropped += 1;
                    each(p, At { batch: at, slot }, false);
                }
                None => {
                    out.records_dropped += 1;
                    break;
                }
            }
            pos += 8 + len;
            slot += 1;
        }
        if layout == Layout::Chained {
            history.push(&raw);
        }
    };
    while at < size {
        match batch_at(at) {
            Ok((raw_len, fresh, end)) => {
                out.batches += 1;
                let data = &bytes[at as usize + 12..end as usize];
                take(at, data, (raw_len, fresh), &mut out, &mut history);
                at = end;
            }
            Err(why) => {
                // A sound header over bytes that fail the checksum (a flipped byte): the batch
                // is still decompressed, and every record in it that passes its own checksum
                // is kept — as are the batches after it, whose dictionary it is.
                let whole = bytes.get(at as usize..at as usize + 12).map(header).filter(
                    |(len, _, raw_len, _)| {
                        *len > 0
                            && *len <= MAX_RECORD
                            && *raw_len <= MAX_RECORD
                            && at + 12 + u64::from(*len) <= size
                    },
                );
                if let Some((len, _, raw_len, fresh)) = whole {
                    let end = at + 12 + u64::from(len);
                    out.unreadable.push(Unreadable {
                        offset: at,
                        end,
                        why: format!("{why} (its records that pass their own checksum are kept)"),
                        followed: end < size,
                    });
                    let data = &bytes[at as usize + 12..end as usize];
                    take(at, data, (raw_len, fresh), &mut out, &mut history);
                    at = end;
                    continue;
                }
                let next = find_valid_after(path, at)?;
                out.unreadable.push(Unreadable {
                    offset: at,
                    end: next.map_or(size, |n| n.offset),
                    why,
                    followed: next.is_some(),
                });
                // What the lost bytes held is unknown; the dictionary keeps their place as
                // zeros, so later batches decompress as far as they do not refer to them.
                history.push(&vec![0u8; DICTIONARY]);
                match next {
                    Some(n) => at = n.offset,
                    None => break,
                }
            }
        }
    }
    Ok(out)
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

/// Write the file `path` atomically: a temporary file (starting with `magic`), synced, renamed
/// into place. On failure the temporary file is removed: a full disk gets its space back.
pub fn write_atomically(
    dir: &Path,
    path: &Path,
    magic: [u8; 8],
    write: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let file = File::create(&tmp).map_err(|e| io_at(&tmp, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        w.write_all(&magic).map_err(|e| io_at(&tmp, e))?;
        write(&mut w)?;
        let file = w.into_inner().map_err(|e| io_at(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| io_at(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| io_at(path, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

/// What a clean close left: the segment appended to last and its length. A store that finds
/// it knows nothing was cut by a crash, so anything missing or unreadable is damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Closed {
    pub segment: u64,
    pub bytes: u64,
}

pub fn closed_path(dir: &Path) -> PathBuf {
    dir.join("CLOSED")
}

pub fn read_closed(dir: &Path) -> Result<Option<Closed>, StoreError> {
    let path = closed_path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                task: path.display().to_string(),
                message: format!("unreadable ({e}); remove it to open the log as after a crash"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(&path, e)),
    }
}

pub fn write_closed(dir: &Path, closed: Closed) -> Result<(), StoreError> {
    let path = closed_path(dir);
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(&closed).map_err(|e| StoreError::Io(e.to_string()))?;
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_at(&path, e));
    }
    sync_dir(dir)
}

pub fn remove_closed(dir: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(closed_path(dir)) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(&closed_path(dir), e)),
    }
}

/// What the log must hold, written with each rotation (and at every start): the segments
/// after the newest snapshot that were closed, each with its length and how many records it
/// holds, and the segment being appended to. Recovery and `store verify` check the files
/// against it: a segment deleted or cut is refused by name with the acknowledged events it
/// held, where the files alone would read as a shorter, sound log. A directory without one
/// (written by a version before it) is not damage: it is written at the next start.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub closed: Vec<ClosedSegment>,
    pub current: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClosedSegment {
    pub segment: u64,
    pub bytes: u64,
    pub records: u64,
}

pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("MANIFEST")
}

/// A line of a manifest or a note: its JSON, a tab, and the CRC32 of the JSON in hex, so that a
/// damaged line is told from one that says something else.
fn checked_line(value: &impl serde::Serialize) -> Result<Vec<u8>, StoreError> {
    let mut line = serde_json::to_vec(value).map_err(|e| StoreError::Io(e.to_string()))?;
    let crc = crc32fast::hash(&line);
    line.extend_from_slice(format!("\t{crc:08x}\n").as_bytes());
    Ok(line)
}

/// The JSON of a line [`checked_line`] wrote, if its checksum matches.
fn checked<T: serde::de::DeserializeOwned>(line: &[u8]) -> Option<T> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let tab = line.iter().rposition(|b| *b == b'\t')?;
    let (json, crc) = (&line[..tab], &line[tab + 1..]);
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    (crc32fast::hash(json) == crc)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

pub fn read_manifest(dir: &Path) -> Result<Option<Manifest>, StoreError> {
    let path = manifest_path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => checked(&bytes)
            .map(Some)
            .ok_or_else(|| StoreError::Damaged {
                file: path.display().to_string(),
                offset: 0,
                message: "unreadable (its checksum does not match, or it is not a manifest); it \
                      says which segments must exist: restore it, or remove it to open the \
                      log without that check"
                    .into(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(&path, e)),
    }
}

/// Replace the manifest atomically (a temporary file, synced, renamed, the directory synced).
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), StoreError> {
    let path = manifest_path(dir);
    let tmp = path.with_extension("tmp");
    let bytes = checked_line(manifest)?;
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_at(&path, e));
    }
    sync_dir(dir)
}

/// A segment's note: one line per batch (with its checksum), appended once the batch is synced, saying where the
/// segment ends after it, how many records it holds, and each record's task and the version
/// it brought the task to (`None`: deleted). Not synced on its own (a second sync per batch
/// would halve the commit rate) except when its segment is closed: after a process crash it is
/// whole, after a power loss it may miss the last batches, never claim more than the segment
/// holds. With it, a segment cut at a batch boundary or deleted after a crash is told from a
/// sound one, and `store verify` says how far each task got.
pub fn note_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("seg-{n:010}.note"))
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NoteLine {
    /// The segment's length after the batch.
    pub end: u64,
    /// Records in the segment after the batch.
    pub records: u64,
    /// Each record of the batch: its task and the version it brought it to (`None`: deleted).
    pub tasks: Vec<(String, Option<u64>)>,
}

/// What a segment's note says: its lines in order (a torn last line is left out: a write a
/// crash cut, never read as damage).
pub fn read_note(dir: &Path, n: u64) -> Result<Option<Vec<NoteLine>>, StoreError> {
    let path = note_path(dir, n);
    let text = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(&path, e)),
    };
    let mut lines = Vec::new();
    for line in text.split(|b| *b == b'\n') {
        match checked::<NoteLine>(line) {
            Some(l) => lines.push(l),
            // A line cut by a crash, zeros a power loss left, or a damaged one: the note ends
            // here (a note only ever says less than the segment holds, never more).
            None => break,
        }
    }
    Ok(Some(lines))
}

/// Append one line to an open note.
pub fn append_note(file: &mut File, line: &NoteLine) -> std::io::Result<()> {
    let bytes = checked_line(line).map_err(|e| std::io::Error::other(e.to_string()))?;
    file.write_all(&bytes)
}

/// Open segment `n`'s note for appending (created when missing).
pub fn open_note(dir: &Path, n: u64) -> Result<File, StoreError> {
    let path = note_path(dir, n);
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_at(&path, e))
}

/// Write segment `n`'s note afresh, as one line saying what the segment holds (at a start,
/// from what recovery read), synced.
pub fn rewrite_note(dir: &Path, n: u64, line: &NoteLine) -> Result<(), StoreError> {
    let path = note_path(dir, n);
    let tmp = path.with_extension("note.tmp");
    let bytes = checked_line(line)?;
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_at(&path, e));
    }
    Ok(())
}

/// The files a log is read from, as recovery and the examining tools (`store verify`,
/// `store salvage`) both read it: the newest snapshot (the segments before it are in it) and the
/// segments from it on, which follow each other from it (from segment 0 with no snapshot).
pub struct Chain {
    pub snapshot: Option<u64>,
    /// The first segment read: the snapshot's, or the first segment there is.
    pub base: u64,
    /// The segment the chain must start with.
    pub first: u64,
    pub segments: Vec<u64>,
}

impl Chain {
    pub fn of(listing: &Listing) -> Chain {
        let snapshot = listing.snapshots.last().copied();
        let base = snapshot.unwrap_or_else(|| listing.segments.first().copied().unwrap_or(0));
        Chain {
            snapshot,
            base,
            first: if snapshot.is_some() { base } else { 0 },
            segments: listing
                .segments
                .iter()
                .copied()
                .filter(|&n| n >= base)
                .collect(),
        }
    }

    /// Where the chain breaks: the segment expected, and the one found in its place (what the
    /// segments between held is lost).
    pub fn gaps(&self) -> Vec<(u64, u64)> {
        let mut expected = self.first;
        let mut out = Vec::new();
        for &n in &self.segments {
            if n != expected {
                out.push((expected, n));
            }
            expected = n + 1;
        }
        out
    }
}

/// Numbered files of the log directory: segments and snapshots, each in order.
#[derive(Default)]
pub struct Listing {
    pub segments: Vec<u64>,
    pub snapshots: Vec<u64>,
    /// Segments' notes ([`note_path`]).
    pub notes: Vec<u64>,
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
        } else if let Some(n) = number("seg-", ".note") {
            out.notes.push(n);
        } else if let Some(n) = number("snap-", ".snap") {
            out.snapshots.push(n);
        } else if name.ends_with(".tmp") {
            out.temporary.push(entry.path());
        }
    }
    out.segments.sort_unstable();
    out.snapshots.sort_unstable();
    out.notes.sort_unstable();
    Ok(out)
}

pub fn io_at(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{}: {e}", path.display()))
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
