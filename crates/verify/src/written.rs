//! Evidence as written: the strict reader's findings over a bundle's or journal's bytes.
//!
//! Every document is scanned by [`knox_types::json`] (grammar, depth, repeated keys at
//! any depth). In a version-2 document the APM, the prompt, the platform evidence and
//! every node payload must already be canonical (RFC 8785): the verifier hashes those
//! bytes as written and names the first byte that is not canonical. In both versions the
//! APM's hash is taken over the APM as written (canonicalised, in version 1), and its
//! typed reading must give back exactly those bytes: reordered or repeated members of a
//! set, an omitted default or any other form that two readers could take differently is
//! refused.

use knox_types::aeg::Node;
use knox_types::bundle::AsWritten;
use knox_types::canon;
use knox_types::digest::{Digest, tag};
use knox_types::json::{self, JsonError, Scan, Seg, Span};
use knox_types::payload::Body;

/// The parts of a bundle checked as written.
pub(crate) fn bundle_part(path: &[Seg]) -> bool {
    match path {
        [Seg::Key(k)] => matches!(k.as_str(), "apm" | "prompt" | "platform" | "refresh"),
        [Seg::Key(n), Seg::Index(_), Seg::Key(p)] => n == "nodes" && p == "payload",
        _ => false,
    }
}

/// The parts of a journal header checked as written.
pub(crate) fn header_part(path: &[Seg]) -> bool {
    matches!(path, [Seg::Key(k)] if matches!(k.as_str(), "apm" | "prompt" | "platform"))
}

/// The part of a journal's node line checked as written.
pub(crate) fn node_part(path: &[Seg]) -> bool {
    matches!(path, [Seg::Key(k)] if k == "payload")
}

/// The typed bodies a document's node payloads were read into: a payload whose body
/// writes back exactly its text is canonical as written, with no second parse.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Typed<'a> {
    /// No payloads in this document (a journal header, a checkpoint line).
    None,
    /// A bundle's nodes, by position.
    Nodes(&'a [Node]),
    /// A journal line's one node.
    Line(&'a Node),
}

impl<'a> Typed<'a> {
    /// The body read from the payload at `path`.
    fn body(self, path: &[Seg]) -> Option<&'a Body> {
        match (self, path) {
            (Self::Nodes(ns), _) => node_of(path)
                .and_then(|i| ns.get(usize::try_from(i).ok()?))
                .filter(|_| matches!(path, [_, _, Seg::Key(p)] if p == "payload"))
                .map(|n| &n.payload),
            (Self::Line(n), [Seg::Key(k)]) if k == "payload" => Some(&n.payload),
            _ => None,
        }
    }
}

/// The node (by position) a path in a bundle lies in.
fn node_of(path: &[Seg]) -> Option<u64> {
    match path {
        [Seg::Key(n), Seg::Index(i), ..] if n == "nodes" => Some(*i as u64),
        _ => None,
    }
}

/// Collects the findings of one document (a bundle, a journal's header or one of its
/// node lines). `node` names the node a journal line holds; `base` is the line's offset
/// in the file, so positions are the file's.
pub(crate) struct Reader<'a> {
    /// The whole file.
    pub file: &'a [u8],
    /// Whether parts must be canonical as written (version 2).
    pub canonical: bool,
    /// What was found.
    pub found: AsWritten,
}

impl Reader<'_> {
    fn at(&self, offset: usize) -> String {
        let (line, column) = json::line_column(self.file, offset);
        format!("byte {offset} (line {line}, column {column})")
    }

    /// Records a repeated key (the scan's positions are relative to `base`).
    pub(crate) fn duplicate(&mut self, d: &JsonError, base: usize, node: Option<u64>) {
        let json::JsonErrorKind::DuplicateKey(key) = &d.kind else {
            return;
        };
        let node = node.or_else(|| node_of(&d.path));
        let at = if d.pointer.is_empty() {
            "the top level".to_string()
        } else {
            format!("`{}`", d.pointer)
        };
        self.found.faults.push((
            node,
            format!(
                "duplicate key `{key}` in {at} at {}: readers keeping the first or the last value see different evidence",
                self.at(base + d.offset)
            ),
        ));
    }

    /// Checks the spans of one document; `apm` is the typed APM read from it (for the
    /// header or bundle) so its reading can be compared with what is written.
    pub(crate) fn spans(
        &mut self,
        doc: &[u8],
        scan: &Scan,
        base: usize,
        node: Option<u64>,
        apm: Option<&knox_types::apm::Apm>,
        typed: Typed<'_>,
    ) {
        if let Some(d) = &scan.duplicate {
            self.duplicate(d, base, node);
        }
        for span in &scan.spans {
            self.span(doc, span, base, node, apm, typed);
        }
    }

    fn span(
        &mut self,
        doc: &[u8],
        span: &Span,
        base: usize,
        node: Option<u64>,
        apm: Option<&knox_types::apm::Apm>,
        typed: Typed<'_>,
    ) {
        let Some(text) = doc.get(span.start..span.end) else {
            return;
        };
        // A node payload's only finding is a non-canonical form. Whatever the body
        // writes is canonical, so a text equal to it is canonical: nothing to report.
        if let Some(body) = typed.body(&span.path) {
            let mut again = Vec::with_capacity(text.len());
            body.write_canonical(&mut again);
            if again == text {
                return;
            }
        }
        let node = node.or_else(|| node_of(&span.path));
        let pointer = json::pointer(&span.path);
        let Ok((canonical, diff)) = json::canonical_difference(text) else {
            return;
        };
        if self.canonical
            && let Some(d) = diff
        {
            self.found.faults.push((
                node,
                format!(
                    "`{pointer}` is not in its canonical form (RFC 8785) as written: first difference at {}",
                    self.at(base + span.start + d)
                ),
            ));
        }
        match pointer.as_str() {
            "/apm" => {
                self.found.apm_hash = Some(Digest::tagged(tag::APM, &[&canonical]));
                let typed = apm.map(canon::to_canonical);
                if let Some(Ok(typed)) = typed
                    && let Some(d) = json::first_difference(&canonical, &typed)
                {
                    let near = canonical
                        .get(d.saturating_sub(24)..(d + 24).min(canonical.len()))
                        .unwrap_or_default();
                    let near = String::from_utf8_lossy(near);
                    // Canonical as written: the position is the file's.
                    let at = if diff.is_none() {
                        self.at(base + span.start + d)
                    } else {
                        format!("byte {d} of its canonical form")
                    };
                    self.found.faults.push((
                        None,
                        format!(
                            "the APM as written is not the APM it reads as (reordered or repeated members of a set, an omitted default, or another form two readers could take differently): they differ at {at}, near `{near}`"
                        ),
                    ));
                }
            }
            "/refresh" => {
                self.found.refresh_hash = Some(Digest::tagged(tag::REFRESH, &[&canonical]));
            }
            "/platform" => {
                self.found.platform_hash = Some(Digest::tagged(tag::PLATFORM, &[&canonical]));
            }
            "/prompt" if text != b"null" => {
                self.found.prompt_hash = Some(Digest::tagged(tag::PROMPT, &[&canonical]));
            }
            _ => {}
        }
    }
}
