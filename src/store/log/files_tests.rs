use super::super::Record;
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
    let read = read_records(&path, Layout::Chained, |r, _| {
        if let Record::Delete { root } = serde_json::from_slice(r).unwrap() {
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
    let read = read_records(&path, Layout::Chained, |_, _| Ok(())).unwrap();
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
    assert_eq!(newer[7], 3);
    std::fs::write(&path, newer).unwrap();
    let err = read_records(&path, Layout::Chained, |_, _| Ok(()))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("seg-0000000000.log")
            && err.to_string().contains("format version 3"),
        "{err}"
    );
    std::fs::write(&path, b"something else").unwrap();
    let err = read_records(&path, Layout::Chained, |_, _| Ok(()))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("not a loopguard task log")
            && err.to_string().contains("seg-0000000000.log"),
        "{err}"
    );
}
