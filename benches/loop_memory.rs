//! Cross-task loop memory: insert and query latency with 10k stored loops (also 100k, the default
//! `memory.max_records`, with `LOOPGUARD_BENCH_100K=1`, and 1M with `LOOPGUARD_BENCH_1M=1`), recall@10 of the HNSW search against brute force, and the latency of
//! brute force itself as the baseline.
//!
//! Run: `cargo bench --bench memory` (no model needed). The vectors are synthetic: 384-d, L2-
//! normalised, drawn around one centre per 100 points (loops come in families of rewordings),
//! which is closer to real embeddings than uniform noise and harder than well-separated clusters.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use loopguard::config::Config;
use loopguard::embed::{cosine, Vector, DIM};
use loopguard::loop_memory::{LoopMemory, LoopRecord};
use loopguard::verdict::LoopKind;
use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform().max(1e-7), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }
}

fn unit(mut v: Vec<f32>) -> Vector {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    Vector::from(v)
}

struct Data {
    centres: Vec<Vec<f32>>,
    rng: Rng,
}

impl Data {
    fn new(n: usize) -> Data {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let centres = (0..(n / 100).max(1))
            .map(|_| (0..DIM).map(|_| rng.normal()).collect())
            .collect();
        Data { centres, rng }
    }

    /// A point near a random centre: cosine to its centre about 0.8.
    fn point(&mut self) -> Vector {
        let c = (self.rng.next() as usize) % self.centres.len();
        let v: Vec<f32> = self.centres[c]
            .iter()
            .map(|x| x + 0.75 * self.rng.normal())
            .collect();
        unit(v)
    }
}

fn record(i: u64) -> LoopRecord {
    LoopRecord {
        id: i + 1,
        task_id: format!("task-{i}"),
        agent_id: None,
        kind: LoopKind::SemanticRepeat,
        tool: None,
        text: String::new(),
        ts: 0,
        gated: false,
        resolution: None,
    }
}

fn build(n: usize) -> (LoopMemory, Vec<Vector>, Data) {
    let mut cfg = Config::default().memory;
    // Room to insert without evicting while measuring.
    cfg.max_records = n * 2;
    // Measure the index, not the exact search loopguard uses below 20k records.
    cfg.exact_search_max_records = 0;
    let mem = LoopMemory::in_memory(cfg);
    let mut data = Data::new(n);
    let vectors: Vec<Vector> = (0..n).map(|_| data.point()).collect();
    let started = Instant::now();
    mem.load(
        vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (record(i as u64), v.clone()))
            .collect(),
    );
    println!(
        "memory/{n}: index built in {:.1}s ({:.0} points/s, both cores)",
        started.elapsed().as_secs_f64(),
        n as f64 / started.elapsed().as_secs_f64()
    );
    (mem, vectors, data)
}

/// Recall@10: how many of the true 10 nearest (brute force) the index returns.
fn recall(mem: &LoopMemory, vectors: &[Vector], data: &mut Data, queries: usize) -> f64 {
    let mut hits = 0usize;
    for _ in 0..queries {
        let q = data.point();
        let mut exact: Vec<(f32, usize)> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (cosine(v, &q), i))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let truth: Vec<String> = exact[..10]
            .iter()
            .map(|(_, i)| format!("task-{i}"))
            .collect();
        let got = mem.similar(&q, 10, -1.0, None);
        hits += got.iter().filter(|s| truth.contains(&s.task_id)).count();
    }
    hits as f64 / (queries * 10) as f64
}

fn bench_size(c: &mut Criterion, n: usize) {
    let (mem, vectors, mut data) = build(n);
    let r = recall(
        &mem,
        &vectors,
        &mut data,
        if n > 100_000 { 100 } else { 300 },
    );
    println!("memory/{n}: recall@10 against brute force = {r:.3}");
    let mut g = c.benchmark_group(format!("memory_{n}"));
    g.sample_size(if n > 100_000 { 10 } else { 50 });
    g.bench_function("query_top3", |b| {
        b.iter_batched(
            || data.point(),
            |q| mem.similar(&q, 3, 0.75, None),
            BatchSize::SmallInput,
        )
    });
    // The baseline the index has to beat: cosine against every stored loop, best three kept.
    g.bench_function("brute_force_top3", |b| {
        b.iter_batched(
            || data.point(),
            |q| {
                let mut best = [(f32::MIN, 0usize); 3];
                for (i, v) in vectors.iter().enumerate() {
                    let sim = cosine(v, &q);
                    if sim > best[2].0 {
                        best[2] = (sim, i);
                        best.sort_by(|a, b| b.0.total_cmp(&a.0));
                    }
                }
                best
            },
            BatchSize::SmallInput,
        )
    });
    let mut next = n as u64 + 1;
    g.bench_function("insert", |b| {
        b.iter_batched(
            || {
                next += 1;
                (record(next), data.point())
            },
            // An in-memory remember never waits: it is ready when first polled.
            |(r, v)| {
                futures_util::FutureExt::now_or_never(mem.remember(r, v))
                    .expect("an in-memory remember is immediate")
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    bench_size(c, 10_000);
    if std::env::var_os("LOOPGUARD_BENCH_100K").is_some() {
        bench_size(c, 100_000);
    }
    if std::env::var_os("LOOPGUARD_BENCH_1M").is_some() {
        bench_size(c, 1_000_000);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
