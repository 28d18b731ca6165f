//! No import cycle among `src/`'s modules (issue 44), in the library and in the binary (the
//! command line and the server's layers).
//!
//! cargo-modules was tried first (`dependencies --acyclic`, 0.27, the last for this toolchain):
//! its graph is one of items, where a type owns its methods and a method's signature uses the
//! type, so it reports `LoopKind → LoopKind::as_str → LoopKind` on any crate with such a method;
//! and it does not read function bodies, where most of the cycles issue 44 names were
//! (`config/load.rs` calling `crate::detect::rules::by_id`). So the check is this test: it reads
//! the sources as the compiler's module tree (`mod` declarations from `lib.rs` and `main.rs`),
//! takes every path a module names — `use` trees, and `crate::`, `super::`, `self::` and
//! child-module paths anywhere in its code, bodies included — resolves re-exports, and lifts
//! each dependency to the two siblings under the modules' nearest common parent: a cycle among
//! the children of any module fails. Test modules are left out: they may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles the library still has, each as the set of sibling modules in it (`crate` is the
/// library's root). None: `config_load` checks `detect.rules_off` against the rule table from
/// above both. Add an entry only with the issue that will remove it; this test says when it is gone.
const KNOWN_LIBRARY_CYCLES: &[(&str, &[&str])] = &[];

type ModPath = Vec<String>;

struct Module {
    file: PathBuf,
    /// The module's own code: comments, strings and test modules removed.
    code: String,
    children: BTreeSet<String>,
    /// Names brought in by `use`: name → the path it stands for.
    imports: BTreeMap<String, ModPath>,
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

/// The code without comments, string and char literals (a `crate::` in a doc or a message is
/// not a dependency).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if src[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if src[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            i = j;
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes + usize::from(rest.starts_with("br"));
            i = src[body..]
                .find(&close)
                .map_or(b.len(), |k| body + k + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let lit = if rest[1..].starts_with('\\') {
                rest[2..].find('\'').map(|k| k + 3)
            } else {
                let c = rest[1..].chars().next().map_or(0, char::len_utf8);
                rest[1 + c..].starts_with('\'').then_some(c + 2)
            };
            match lit {
                Some(n) => {
                    i += n;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br"`…: the number of `#`s of a raw string starting here.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s).strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The code without its test modules (`#[cfg(test)] mod x;` and `#[cfg(test)] mod x { … }`,
/// other attributes allowed between).
fn without_tests(code: &str) -> String {
    let test_mod = regex::Regex::new(
        r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+[A-Za-z_][A-Za-z0-9_]*\s*",
    )
    .unwrap();
    let mut out = String::new();
    let mut at = 0;
    for m in test_mod.find_iter(code) {
        if m.start() < at {
            continue;
        }
        out.push_str(&code[at..m.start()]);
        let rest = &code[m.end()..];
        at = m.end()
            + if rest.starts_with('{') {
                let mut depth = 0;
                rest.char_indices()
                    .find(|&(_, c)| {
                        depth += match c {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        depth == 0
                    })
                    .map_or(rest.len(), |(i, _)| i + 1)
            } else {
                rest.find(';').map_or(rest.len(), |i| i + 1)
            };
    }
    out.push_str(&code[at.min(code.len())..]);
    out
}

/// Every path of a `use` tree (`a::{b, c::{d, e as f}, g::*}`), with the name it binds.
fn use_paths(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in tree.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if matches!(c, '{' | '}' | ',' | '*') {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    let mut out = Vec::new();
    let mut pos = 0;
    parse_tree(&tokens, &mut pos, Vec::new(), &mut out);
    out
}

fn parse_tree(
    t: &[String],
    pos: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    while *pos < t.len() {
        match t[*pos].as_str() {
            "{" => {
                *pos += 1;
                while *pos < t.len() && t[*pos] != "}" {
                    if t[*pos] == "," {
                        *pos += 1;
                        continue;
                    }
                    parse_tree(t, pos, prefix.clone(), out);
                }
                *pos += 1;
                return;
            }
            "}" | "," => break,
            "*" => {
                *pos += 1;
                out.push((prefix.clone(), None));
                return;
            }
            "as" => {
                let alias = t.get(*pos + 1).cloned();
                *pos += 2;
                let last = prefix.last().cloned();
                out.push((prefix.clone(), alias.filter(|a| a != "_").or(last)));
                return;
            }
            w => {
                prefix.push(w.to_string());
                *pos += 1;
                // The tokens dropped `::`: the path goes on unless the tree ends here.
                if matches!(
                    t.get(*pos).map(String::as_str),
                    None | Some("}") | Some(",")
                ) {
                    let name = if w == "self" {
                        prefix.pop();
                        prefix.last().cloned()
                    } else {
                        Some(w.to_string())
                    };
                    out.push((prefix, name));
                    return;
                }
            }
        }
    }
}

/// The file of `mod name;` declared in `file`.
fn child_file(file: &Path, name: &str) -> Option<PathBuf> {
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let dir = if matches!(stem, "mod" | "lib" | "main") {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

fn load(root: &Path) -> Crate {
    let decl =
        regex::Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
            .unwrap();
    let mut modules = BTreeMap::new();
    let mut queue = vec![(Vec::new(), root.to_path_buf())];
    while let Some((path, file)) = queue.pop() {
        let src = std::fs::read_to_string(&file).unwrap();
        let code = without_tests(&strip(&src));
        let mut children = BTreeSet::new();
        for c in decl.captures_iter(&code) {
            let name = c[1].to_string();
            let child = child_file(&file, &name)
                .unwrap_or_else(|| panic!("no file for `mod {name}` in {}", file.display()));
            let mut p: ModPath = path.clone();
            p.push(name.clone());
            queue.push((p, child));
            children.insert(name);
        }
        modules.insert(
            path,
            Module {
                file,
                code,
                children,
                imports: BTreeMap::new(),
            },
        );
    }
    let mut krate = Crate { modules };
    let use_decl = regex::Regex::new(r"(?s)\buse\s+([^;]*);").unwrap();
    let paths: Vec<ModPath> = krate.modules.keys().cloned().collect();
    for m in paths {
        let code = krate.modules[&m].code.clone();
        let mut imports = BTreeMap::new();
        for c in use_decl.captures_iter(&code) {
            for (p, name) in use_paths(&c[1]) {
                if let (Some(abs), Some(name)) = (krate.absolute(&m, &p), name) {
                    imports.insert(name, abs);
                }
            }
        }
        krate.modules.get_mut(&m).unwrap().imports = imports;
    }
    krate
}

impl Crate {
    /// `p` as seen from module `at`, from the crate's root; None for another crate's path.
    fn absolute(&self, at: &ModPath, p: &[String]) -> Option<ModPath> {
        let (mut base, mut rest) = match p.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &p[1..]),
            Some("self") => (at.clone(), &p[1..]),
            Some("super") => (at[..at.len().saturating_sub(1)].to_vec(), &p[1..]),
            Some(first) if self.modules[at].children.contains(first) => (at.clone(), p),
            _ => return None,
        };
        while rest.first().map(String::as_str) == Some("super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module an absolute path lands in, through re-exports (`pub use state::AppState`).
    fn module_of(&self, p: &[String]) -> ModPath {
        let mut at: ModPath = Vec::new();
        let mut i = 0;
        let mut hops = 0;
        let mut path = p.to_vec();
        while i < path.len() {
            let m = &self.modules[&at];
            let s = &path[i];
            if m.children.contains(s) {
                at.push(s.clone());
                i += 1;
            } else if let Some(target) = m.imports.get(s).filter(|_| hops < 8) {
                hops += 1;
                let mut next = target.clone();
                next.extend(path[i + 1..].iter().cloned());
                path = next;
                at = Vec::new();
                i = 0;
            } else {
                break;
            }
        }
        at
    }

    /// Every module `m` depends on, with the path that says so.
    fn dependencies(&self, m: &ModPath) -> BTreeMap<ModPath, String> {
        let module = &self.modules[m];
        let path = regex::Regex::new(
            r"(?:^|[^A-Za-z0-9_:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)",
        )
        .unwrap();
        let mut found: Vec<Vec<String>> = path
            .captures_iter(&module.code)
            .map(|c| c[1].split("::").map(str::to_string).collect())
            .collect();
        let use_decl = regex::Regex::new(r"(?s)\buse\s+([^;]*);").unwrap();
        for c in use_decl.captures_iter(&module.code) {
            found.extend(use_paths(&c[1]).into_iter().map(|(p, _)| p));
        }
        // A name imported by `use` and then written as a path (`conn::serve`) is its import.
        let mut out = BTreeMap::new();
        for p in found.into_iter().filter(|p| !p.is_empty()) {
            let abs = match module.imports.get(&p[0]) {
                Some(target) if !matches!(p[0].as_str(), "crate" | "self" | "super") => {
                    let mut a = target.clone();
                    a.extend(p[1..].iter().cloned());
                    Some(a)
                }
                _ => self.absolute(m, &p),
            };
            if let Some(abs) = abs {
                let to = self.module_of(&abs);
                out.entry(to).or_insert_with(|| p.join("::"));
            }
        }
        out
    }

    /// Cycles among the children of each module: (parent, the children in one cycle, an edge
    /// of each child to the next as `file: path`).
    fn cycles(&self) -> Vec<(ModPath, Vec<String>, Vec<String>)> {
        // parent → child → child → why
        let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> =
            BTreeMap::new();
        for (from, module) in &self.modules {
            for (to, why) in self.dependencies(from) {
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue; // a module and its own ancestor or descendant
                }
                graphs
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .entry(to[common].clone())
                    .or_insert_with(|| format!("{}: {why}", module.file.display()));
            }
        }
        let mut out = Vec::new();
        for (parent, g) in graphs {
            for scc in strongly_connected(&g) {
                let edges = scc
                    .iter()
                    .flat_map(|a| {
                        g[a].iter()
                            .filter(|(b, _)| scc.contains(b))
                            .map(move |(b, why)| format!("{a} → {b} ({why})"))
                    })
                    .collect();
                out.push((parent.clone(), scc, edges));
            }
        }
        out
    }
}

/// Tarjan's strongly connected components of two or more nodes, each sorted.
fn strongly_connected(g: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        let g = t.g;
        for w in g.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// A module's path as the messages write it (`crate` for the root).
fn name(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".to_string()
    } else {
        p.join("::")
    }
}

fn describe(cycles: &[(ModPath, Vec<String>, Vec<String>)]) -> String {
    cycles
        .iter()
        .map(|(parent, scc, edges)| {
            format!(
                "under `{}`: {}\n    {}",
                name(parent),
                scc.join(", "),
                edges.join("\n    ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_binary_has_no_import_cycle() {
    let bin = load(&src().join("main.rs"));
    assert!(
        bin.modules
            .contains_key(&vec!["server".to_string(), "http".to_string()]),
        "the server's modules were read: {:?}",
        bin.modules.keys().collect::<Vec<_>>()
    );
    let cycles = bin.cycles();
    assert!(cycles.is_empty(), "import cycles:\n{}", describe(&cycles));
}

#[test]
fn the_library_has_no_import_cycle_but_the_known_ones() {
    let lib = load(&src().join("lib.rs"));
    let cycles = lib.cycles();
    let found: BTreeSet<(String, Vec<String>)> = cycles
        .iter()
        .map(|(p, scc, _)| (name(p), scc.clone()))
        .collect();
    let known: BTreeSet<(String, Vec<String>)> = KNOWN_LIBRARY_CYCLES
        .iter()
        .map(|(p, m)| (p.to_string(), m.iter().map(|s| s.to_string()).collect()))
        .collect();
    let new: Vec<_> = cycles
        .iter()
        .filter(|(p, scc, _)| !known.contains(&(name(p), scc.clone())))
        .cloned()
        .collect();
    assert!(new.is_empty(), "new import cycles:\n{}", describe(&new));
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "these cycles are gone: remove them from KNOWN_LIBRARY_CYCLES: {gone:?}"
    );
}

#[test]
fn the_reader_sees_paths_in_code_not_in_comments_or_strings() {
    let code =
        strip("// crate::a\nlet s = \"crate::b\"; let c = '\"'; crate::c::d(); /* super::e */");
    assert!(!code.contains("crate::a") && !code.contains("crate::b") && !code.contains("super::e"));
    assert!(code.contains("crate::c::d"), "{code}");
    let paths: Vec<_> = use_paths("super::{a::{self, B}, c as d, e::*}")
        .into_iter()
        .map(|(p, n)| (p.join("::"), n))
        .collect();
    assert_eq!(
        paths,
        [
            ("super::a".to_string(), Some("a".to_string())),
            ("super::a::B".to_string(), Some("B".to_string())),
            ("super::c".to_string(), Some("d".to_string())),
            ("super::e".to_string(), None),
        ]
    );
}
