//! Checks a crate's module graph from its sources.
//!
//! [`Crate::load`] reads a crate from its root file (`src/lib.rs` or `src/main.rs`),
//! following `mod` declarations, and records for each module the names it defines, its
//! `use` declarations, and every path its code names (in items, expressions, types,
//! patterns and the tokens of macro calls). Each path is resolved the way the compiler
//! resolves it — through `use`s, re-exports and glob imports — to the module that
//! *defines* the item, so that a re-export does not hide where a name comes from.
//!
//! Two checks read that graph:
//! - [`Crate::sibling_cycles`]: modules with the same parent must not reach each other,
//!   directly or through others. Module `a` reaches sibling `b` when code in `a` (or
//!   below it) names an item defined in `b` (or below it). A child naming its parent's
//!   items, or a parent its children's, is no cycle: that is how a module is split into
//!   files. Code under `#[cfg(test)]` is not counted: a test may reach anything.
//! - [`Crate::root_imports`]: code that imports a name through the crate root's
//!   re-exports (`use crate::Name` where the root only re-exports `Name`) instead of from
//!   the module that defines it.
//!
//! Macros 2.0, `#[path]` attributes and names made by macros are not followed; method
//! calls are not paths and make no edge.
//!
//! # Example
//! ```no_run
//! use spool_modules::Crate;
//!
//! let krate = Crate::load("crates/spool-core".as_ref()).expect("readable sources");
//! for cycle in krate.sibling_cycles() {
//!     println!("{cycle}");
//! }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

mod read;
mod scc;

use read::parse;
use scc::strongly_connected;

/// Why a crate's sources could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Neither `src/lib.rs` nor `src/main.rs` exists.
    #[error("{0}: no src/lib.rs or src/main.rs")]
    NoRoot(PathBuf),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// A file is not Rust that `syn` parses.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What parsing it said.
        source: syn::Error,
    },
    /// A `mod name;` has no file.
    #[error("{path}: `mod {name};` has no file (looked for {looked})")]
    NoModuleFile {
        /// The file that declares the module.
        path: PathBuf,
        /// The module's name.
        name: String,
        /// The files looked for.
        looked: String,
    },
}

/// A crate's modules, as read from its sources.
#[derive(Debug)]
pub struct Crate {
    /// The crate's directory (the one with `Cargo.toml`).
    dir: PathBuf,
    /// The modules; `0` is the crate root.
    modules: Vec<Module>,
    /// `macro_rules!` macros by name: the modules that define them.
    macros: BTreeMap<String, Vec<usize>>,
}

#[derive(Debug)]
struct Module {
    /// The path from the crate root (empty for the root).
    path: Vec<String>,
    /// The file the module's items are in.
    file: PathBuf,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names of items defined here (other than modules).
    items: BTreeSet<String>,
    /// `use` declarations by the name they bring in.
    uses: BTreeMap<String, Vec<Vec<String>>>,
    /// The sources of `use …::*` declarations.
    globs: Vec<Vec<String>>,
    /// Every path the module's code names.
    refs: Vec<Ref>,
}

#[derive(Debug)]
struct Ref {
    segments: Vec<String>,
    line: usize,
    /// A macro's name: looked up among `macro_rules!` macros too.
    is_macro: bool,
}

/// The edges among one parent's children: (from child, to child) -> the uses that make
/// the edge (`file:line path`).
type SiblingEdges = BTreeMap<(usize, usize), BTreeSet<String>>;

/// What a path resolves to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Module(usize),
    /// An item defined in this module.
    Item(usize),
}

impl Target {
    fn module(self) -> usize {
        match self {
            Target::Module(m) | Target::Item(m) => m,
        }
    }
}

/// Modules with one parent that reach each other: a cycle [`Crate::sibling_cycles`]
/// found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The crate's directory.
    pub krate: String,
    /// The parent module's path (`crate`, `crate::scheduler`, …).
    pub parent: String,
    /// The siblings in the cycle, by name.
    pub members: Vec<String>,
    /// The edges among them, each with what makes it.
    pub edges: Vec<Edge>,
}

/// One sibling reaching another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The module that names the item.
    pub from: String,
    /// The module that defines it.
    pub to: String,
    /// The uses that make the edge: `file:line path`.
    pub because: Vec<String>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: a cycle among the children of {}: {}",
            self.krate,
            self.parent,
            self.members.join(", ")
        )?;
        for edge in &self.edges {
            writeln!(f, "  {} -> {}:", edge.from, edge.to)?;
            for because in edge.because.iter().take(6) {
                writeln!(f, "    {because}")?;
            }
            if edge.because.len() > 6 {
                writeln!(f, "    … and {} more", edge.because.len() - 6)?;
            }
        }
        Ok(())
    }
}

/// A name imported through the crate root's re-exports ([`Crate::root_imports`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootImport {
    /// Where: `file:line`.
    pub at: String,
    /// The path as written.
    pub path: String,
    /// The module that defines the name (`crate::task`, …).
    pub defined_in: String,
}

impl fmt::Display for RootImport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: `{}` goes through the crate root; it is defined in {}",
            self.at, self.path, self.defined_in
        )
    }
}

impl Crate {
    /// Reads the crate in `dir` (the directory with its `Cargo.toml`).
    ///
    /// # Errors
    /// A [`LoadError`] if a file is missing, unreadable or not Rust.
    pub fn load(dir: &Path) -> Result<Crate, LoadError> {
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| LoadError::NoRoot(dir.to_path_buf()))?;
        let mut krate = Crate {
            dir: dir.to_path_buf(),
            modules: Vec::new(),
            macros: BTreeMap::new(),
        };
        let file = parse(&root)?;
        krate
            .modules
            .push(Module::new(Vec::new(), root.clone(), None));
        let dir_of_children = root.parent().map(Path::to_path_buf).unwrap_or_default();
        krate.read_items(0, &file.items, &dir_of_children)?;
        Ok(krate)
    }

    /// The edges among the children of the module at `parent` (`crate`,
    /// `crate::scheduler`, …), sorted by name; `None` if there is no such module.
    pub fn sibling_edges(&self, parent: &str) -> Option<Vec<Edge>> {
        let path: Vec<String> = parent.split("::").skip(1).map(str::to_owned).collect();
        let index = self.module_at(&path)?;
        let mut edges: Vec<Edge> = self
            .edges()
            .remove(&index)
            .unwrap_or_default()
            .into_iter()
            .map(|((a, b), because)| Edge {
                from: self.name(a),
                to: self.name(b),
                because: because.into_iter().collect(),
            })
            .collect();
        edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
        Some(edges)
    }

    /// Every cycle among sibling modules, parents in module order.
    pub fn sibling_cycles(&self) -> Vec<Cycle> {
        let edges = self.edges();
        let mut cycles = Vec::new();
        for (parent, among) in edges {
            let graph: BTreeMap<usize, BTreeSet<usize>> =
                among.keys().fold(BTreeMap::new(), |mut g, (a, b)| {
                    g.entry(*a).or_insert_with(BTreeSet::new).insert(*b);
                    g
                });
            for component in strongly_connected(&graph) {
                if component.len() < 2 {
                    continue;
                }
                let members: BTreeSet<usize> = component.iter().copied().collect();
                let edges = among
                    .iter()
                    .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                    .map(|((a, b), because)| Edge {
                        from: self.name(*a),
                        to: self.name(*b),
                        because: because.iter().cloned().collect(),
                    })
                    .collect();
                let mut names: Vec<String> = members.iter().map(|m| self.name(*m)).collect();
                names.sort();
                let mut edges: Vec<Edge> = edges;
                edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
                cycles.push(Cycle {
                    krate: self.shown(&self.dir),
                    parent: self.full_name(parent),
                    members: names,
                    edges,
                });
            }
        }
        cycles
    }

    /// parent -> (from child, to child) -> the uses that make the edge.
    fn edges(&self) -> BTreeMap<usize, SiblingEdges> {
        let mut edges: BTreeMap<usize, SiblingEdges> = BTreeMap::new();
        for (from, module) in self.modules.iter().enumerate() {
            for r in &module.refs {
                for target in self.resolve_ref(from, r) {
                    let to = target.module();
                    if let Some((parent, a, b)) = self.siblings_under(from, to) {
                        edges
                            .entry(parent)
                            .or_default()
                            .entry((a, b))
                            .or_default()
                            .insert(format!(
                                "{}:{} {}",
                                self.shown(&module.file),
                                r.line,
                                r.segments.join("::")
                            ));
                    }
                }
            }
        }
        edges
    }

    /// Every path that names an item through the crate root's re-exports, outside the
    /// crate root itself.
    pub fn root_imports(&self) -> Vec<RootImport> {
        let root = &self.modules[0];
        let mut found = Vec::new();
        for (index, module) in self.modules.iter().enumerate().skip(1) {
            for r in &module.refs {
                let [first, second, ..] = r.segments.as_slice() else {
                    continue;
                };
                if first != "crate"
                    || root.children.contains_key(second)
                    || root.items.contains(second)
                    || !root.uses.contains_key(second)
                {
                    continue;
                }
                let defined_in: BTreeSet<String> = self
                    .resolve_ref(index, r)
                    .into_iter()
                    .map(|t| self.full_name(t.module()))
                    .collect();
                found.push(RootImport {
                    at: format!("{}:{}", self.shown(&module.file), r.line),
                    path: r.segments.join("::"),
                    defined_in: defined_in.into_iter().collect::<Vec<_>>().join(" and "),
                });
            }
        }
        found
    }

    /// The pair of siblings under one parent that an edge `from -> to` joins, if the two
    /// are not one inside the other.
    fn siblings_under(&self, from: usize, to: usize) -> Option<(usize, usize, usize)> {
        let a = &self.modules[from].path;
        let b = &self.modules[to].path;
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        if common == a.len() || common == b.len() {
            return None;
        }
        let parent = self.module_at(&a[..common])?;
        let x = *self.modules[parent].children.get(&a[common])?;
        let y = *self.modules[parent].children.get(&b[common])?;
        Some((parent, x, y))
    }

    fn module_at(&self, path: &[String]) -> Option<usize> {
        path.iter()
            .try_fold(0, |m, name| self.modules[m].children.get(name).copied())
    }

    fn resolve_ref(&self, module: usize, r: &Ref) -> BTreeSet<Target> {
        let mut seen = BTreeSet::new();
        let mut found = self.resolve(module, &r.segments, &mut seen);
        if found.is_empty()
            && r.is_macro
            && r.segments.len() == 1
            && let Some(defined) = self.macros.get(&r.segments[0])
        {
            found.extend(defined.iter().map(|m| Target::Item(*m)));
        }
        found
    }

    fn resolve(
        &self,
        module: usize,
        segments: &[String],
        seen: &mut BTreeSet<(usize, String)>,
    ) -> BTreeSet<Target> {
        let Some((first, rest)) = segments.split_first() else {
            return BTreeSet::new();
        };
        let mut current: BTreeSet<Target> = match first.as_str() {
            "crate" => [Target::Module(0)].into(),
            "self" => [Target::Module(module)].into(),
            "super" => self.modules[module]
                .parent
                .map(Target::Module)
                .into_iter()
                .collect(),
            "Self" => return BTreeSet::new(),
            name => self.lookup(module, name, seen),
        };
        for segment in rest {
            let mut next = BTreeSet::new();
            for target in current {
                match target {
                    Target::Module(m) => match segment.as_str() {
                        "super" => next.extend(self.modules[m].parent.map(Target::Module)),
                        "self" => {
                            next.insert(Target::Module(m));
                        }
                        name => next.extend(self.lookup(m, name, seen)),
                    },
                    // A path into an item (a variant, an associated item) stays with
                    // the module that defines the item.
                    item @ Target::Item(_) => {
                        next.insert(item);
                    }
                }
            }
            current = next;
        }
        current
    }

    /// What `name` means in `module`: a child module, an item defined there, or what a
    /// `use` or glob import brings in.
    fn lookup(
        &self,
        module: usize,
        name: &str,
        seen: &mut BTreeSet<(usize, String)>,
    ) -> BTreeSet<Target> {
        if !seen.insert((module, name.to_owned())) {
            return BTreeSet::new();
        }
        let m = &self.modules[module];
        let mut found = BTreeSet::new();
        if let Some(child) = m.children.get(name) {
            found.insert(Target::Module(*child));
        }
        if m.items.contains(name) {
            found.insert(Target::Item(module));
        }
        for segments in m.uses.get(name).into_iter().flatten() {
            found.extend(self.resolve(module, segments, seen));
        }
        if found.is_empty() {
            for glob in &m.globs {
                for source in self.resolve(module, glob, seen) {
                    if let Target::Module(g) = source {
                        found.extend(self.lookup(g, name, seen));
                    }
                }
            }
        }
        found
    }

    fn name(&self, module: usize) -> String {
        self.modules[module]
            .path
            .last()
            .cloned()
            .unwrap_or_default()
    }

    fn full_name(&self, module: usize) -> String {
        let mut name = String::from("crate");
        for segment in &self.modules[module].path {
            name.push_str("::");
            name.push_str(segment);
        }
        name
    }

    fn shown(&self, path: &Path) -> String {
        let base = self.dir.parent().unwrap_or(&self.dir);
        path.strip_prefix(base)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

impl Module {
    fn new(path: Vec<String>, file: PathBuf, parent: Option<usize>) -> Module {
        Module {
            path,
            file,
            parent,
            children: BTreeMap::new(),
            items: BTreeSet::new(),
            uses: BTreeMap::new(),
            globs: Vec::new(),
            refs: Vec::new(),
        }
    }
}

/// The names of the crates in `dir` (each a directory with a `Cargo.toml`), sorted.
///
/// # Errors
/// If `dir` cannot be listed.
pub fn workspace_crates(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.path().join("Cargo.toml").is_file() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}
