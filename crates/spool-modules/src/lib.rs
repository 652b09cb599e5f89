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

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

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

    fn read_items(
        &mut self,
        module: usize,
        items: &[syn::Item],
        children_dir: &Path,
    ) -> Result<(), LoadError> {
        for item in items {
            if is_test_only(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => self.read_module(module, m, children_dir)?,
                syn::Item::Use(u) => {
                    let mut flat = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut flat);
                    let line = u.use_token.span.start().line;
                    let m = &mut self.modules[module];
                    for (name, segments) in flat {
                        m.refs.push(Ref {
                            segments: segments.clone(),
                            line,
                            is_macro: false,
                        });
                        match name {
                            Some(name) => m.uses.entry(name).or_default().push(segments),
                            None => m.globs.push(segments),
                        }
                    }
                }
                other => {
                    if let Some(name) = item_name(other) {
                        self.modules[module].items.insert(name.clone());
                        if matches!(other, syn::Item::Macro(_)) {
                            self.macros.entry(name).or_default().push(module);
                        }
                    }
                    let mut collect = Collect::default();
                    collect.visit_item(other);
                    let m = &mut self.modules[module];
                    m.refs.extend(collect.refs);
                    for (name, segments) in collect.uses {
                        match name {
                            Some(name) => m.uses.entry(name).or_default().push(segments),
                            None => m.globs.push(segments),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn read_module(
        &mut self,
        parent: usize,
        decl: &syn::ItemMod,
        children_dir: &Path,
    ) -> Result<(), LoadError> {
        let name = decl.ident.to_string();
        let mut path = self.modules[parent].path.clone();
        path.push(name.clone());
        let index = self.modules.len();
        let own_dir = children_dir.join(&name);
        match &decl.content {
            Some((_, items)) => {
                let file = self.modules[parent].file.clone();
                self.modules.push(Module::new(path, file, Some(parent)));
                self.modules[parent].children.insert(name, index);
                self.read_items(index, items, &own_dir)
            }
            None => {
                let flat = children_dir.join(format!("{name}.rs"));
                let nested = own_dir.join("mod.rs");
                let file = if flat.is_file() {
                    flat
                } else if nested.is_file() {
                    nested
                } else {
                    return Err(LoadError::NoModuleFile {
                        path: self.modules[parent].file.clone(),
                        name,
                        looked: format!("{} and {}", flat.display(), nested.display()),
                    });
                };
                let parsed = parse(&file)?;
                self.modules.push(Module::new(path, file, Some(parent)));
                self.modules[parent].children.insert(name, index);
                self.read_items(index, &parsed.items, &own_dir)
            }
        }
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
    #[allow(clippy::type_complexity)]
    fn edges(&self) -> BTreeMap<usize, BTreeMap<(usize, usize), BTreeSet<String>>> {
        let mut edges: BTreeMap<usize, BTreeMap<(usize, usize), BTreeSet<String>>> =
            BTreeMap::new();
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
        if found.is_empty() && r.is_macro && r.segments.len() == 1 {
            if let Some(defined) = self.macros.get(&r.segments[0]) {
                found.extend(defined.iter().map(|m| Target::Item(*m)));
            }
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

fn parse(path: &Path) -> Result<syn::File, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    syn::parse_file(&text).map_err(|source| LoadError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether attributes hold `#[cfg(test)]` (or `#[cfg(all(test, …))]`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = attr.meta.require_list() else {
            return false;
        };
        let tokens = list.tokens.to_string();
        tokens == "test" || tokens.starts_with("all (test") || tokens.starts_with("all(test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace, if any.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) if i.mac.path.is_ident("macro_rules") => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Flattens a `use` tree into `(name brought in, path)`; `None` for a glob.
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push((Some(last.clone()), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push((Some(name), path));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            let ident = r.ident.to_string();
            if ident != "self" {
                path.push(ident);
            }
            out.push((Some(r.rename.to_string()), path));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

/// Collects the paths an item's code names, skipping `#[cfg(test)]` code and nested
/// modules (each read as a module of its own).
#[derive(Default)]
struct Collect {
    refs: Vec<Ref>,
    /// `use` declarations inside function bodies, taken as the module's own.
    uses: Vec<(Option<String>, Vec<String>)>,
}

impl<'ast> Visit<'ast> for Collect {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) || matches!(item, syn::Item::Mod(_)) {
            return;
        }
        if let syn::Item::Use(u) = item {
            let mut flat = Vec::new();
            flatten_use(&u.tree, &mut Vec::new(), &mut flat);
            let line = u.use_token.span.start().line;
            for (_, segments) in &flat {
                self.refs.push(Ref {
                    segments: segments.clone(),
                    line,
                    is_macro: false,
                });
            }
            self.uses.extend(flat);
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_expr(&mut self, expr: &'ast syn::Expr) {
        let test_only = match expr {
            syn::Expr::Block(b) => is_test_only(&b.attrs),
            syn::Expr::Call(c) => is_test_only(&c.attrs),
            syn::Expr::MethodCall(c) => is_test_only(&c.attrs),
            syn::Expr::Macro(m) => is_test_only(&m.attrs),
            _ => false,
        };
        if !test_only {
            syn::visit::visit_expr(self, expr);
        }
    }

    fn visit_stmt(&mut self, stmt: &'ast syn::Stmt) {
        let test_only = match stmt {
            syn::Stmt::Local(l) => is_test_only(&l.attrs),
            syn::Stmt::Macro(m) => is_test_only(&m.attrs),
            _ => false,
        };
        if !test_only {
            syn::visit::visit_stmt(self, stmt);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.refs.push(Ref {
                segments: path.segments.iter().map(|s| s.ident.to_string()).collect(),
                line: path
                    .segments
                    .first()
                    .map_or(0, |s| s.ident.span().start().line),
                is_macro: false,
            });
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if mac.path.leading_colon.is_none() {
            self.refs.push(Ref {
                segments: mac
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect(),
                line: mac
                    .path
                    .segments
                    .first()
                    .map_or(0, |s| s.ident.span().start().line),
                is_macro: true,
            });
        }
        for segment in &mac.path.segments {
            self.visit_path_arguments(&segment.arguments);
        }
        self.scan_tokens(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

impl Collect {
    /// Paths in a macro's tokens: each `name(::name)*` not after a `.` or `::`.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => {
                    self.scan_tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(ident) if !follows_dot_or_colons(&tokens, i) => {
                    let line = ident.span().start().line;
                    let mut segments = vec![ident.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    let is_macro =
                        matches!(tokens.get(j), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                    self.refs.push(Ref {
                        segments,
                        line,
                        is_macro,
                    });
                    i = j;
                }
                _ => i += 1,
            }
        }
    }
}

fn follows_dot_or_colons(tokens: &[TokenTree], i: usize) -> bool {
    let Some(before) = i.checked_sub(1).and_then(|b| tokens.get(b)) else {
        return false;
    };
    matches!(before, TokenTree::Punct(p) if p.as_char() == '.' || p.as_char() == ':')
}

/// Strongly connected components (Tarjan), in a fixed order.
fn strongly_connected(graph: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct State<'a> {
        graph: &'a BTreeMap<usize, BTreeSet<usize>>,
        next: usize,
        index: BTreeMap<usize, usize>,
        low: BTreeMap<usize, usize>,
        stack: Vec<usize>,
        on_stack: BTreeSet<usize>,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in s.graph.get(&v).into_iter().flatten() {
            if !s.index.contains_key(&w) {
                visit(s, w);
                let low = s.low[&v].min(s.low[&w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(&w) {
                let low = s.low[&v].min(s.index[&w]);
                s.low.insert(v, low);
            }
        }
        if s.low[&v] == s.index[&v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort_unstable();
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(&v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
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
