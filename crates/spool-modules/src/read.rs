//! Reading a crate's sources: the module tree from `mod` declarations, and for each
//! module the names it defines, its `use` declarations and the paths its code names.

use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::{Crate, LoadError, Module, Ref};

impl Crate {
    pub(crate) fn read_items(
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
}

pub(crate) fn parse(path: &Path) -> Result<syn::File, LoadError> {
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
