//! Canonical XML 1.1 (without comments) of a roxmltree subtree, enough for the enveloped XMLDSig signatures of NVIDIA RIMs.

use roxmltree::{Node, NodeType};

/// Where canonicalization starts and which subtree it leaves out.
pub(crate) struct Subset<'a, 'input> {
    /// The apex element: it renders every namespace in scope.
    pub(crate) apex: Node<'a, 'input>,
    /// An element omitted with its subtree (the enveloped signature).
    pub(crate) exclude: Option<Node<'a, 'input>>,
    /// The document text (element and attribute names are taken from it as written).
    pub(crate) source: &'input str,
}

/// Namespace declarations (prefix, uri) in scope at `node`, without `xml`.
fn in_scope(node: Node<'_, '_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = node
        .namespaces()
        .filter(|ns| ns.name() != Some("xml"))
        .map(|ns| {
            (
                ns.name().unwrap_or_default().to_owned(),
                ns.uri().to_owned(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn escape_text(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

fn escape_attr(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

impl Subset<'_, '_> {
    fn qname(&self, node: Node<'_, '_>) -> &str {
        let start = node.range().start.saturating_add(1);
        let rest = self.source.get(start..).unwrap_or_default();
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(rest.len());
        rest.get(..end).unwrap_or_default()
    }

    fn start_tag(&self, node: Node<'_, '_>, out: &mut String) {
        let name = self.qname(node);
        out.push('<');
        out.push_str(name);
        let mine = in_scope(node);
        let inherited = if node == self.apex {
            Vec::new()
        } else {
            node.parent_element().map(in_scope).unwrap_or_default()
        };
        // Default namespace sorts first (empty prefix), then by prefix.
        for (prefix, uri) in &mine {
            if inherited.iter().any(|(p, u)| p == prefix && u == uri) {
                continue;
            }
            if prefix.is_empty() {
                out.push_str(" xmlns=\"");
            } else {
                out.push_str(" xmlns:");
                out.push_str(prefix);
                out.push_str("=\"");
            }
            escape_attr(uri, out);
            out.push('"');
        }
        let undeclares_default = !mine.iter().any(|(p, _)| p.is_empty())
            && inherited.iter().any(|(p, u)| p.is_empty() && !u.is_empty());
        if undeclares_default {
            out.push_str(" xmlns=\"\"");
        }
        let mut attrs: Vec<_> = node.attributes().collect();
        attrs.sort_by(|a, b| {
            (a.namespace().unwrap_or_default(), a.name())
                .cmp(&(b.namespace().unwrap_or_default(), b.name()))
        });
        for attr in attrs {
            let qname = self
                .source
                .get(attr.range_qname())
                .unwrap_or_else(|| attr.name());
            out.push(' ');
            out.push_str(qname);
            out.push_str("=\"");
            escape_attr(attr.value(), out);
            out.push('"');
        }
        out.push('>');
    }

    fn render(&self, node: Node<'_, '_>, out: &mut String) {
        if Some(node) == self.exclude {
            return;
        }
        match node.node_type() {
            NodeType::Element => {
                self.start_tag(node, out);
                for child in node.children() {
                    self.render(child, out);
                }
                out.push_str("</");
                out.push_str(self.qname(node));
                out.push('>');
            }
            NodeType::Text => escape_text(node.text().unwrap_or_default(), out),
            NodeType::PI => {
                if let Some(pi) = node.pi() {
                    out.push_str("<?");
                    out.push_str(pi.target);
                    if let Some(value) = pi.value {
                        out.push(' ');
                        out.push_str(value);
                    }
                    out.push_str("?>");
                }
            }
            NodeType::Comment | NodeType::Root => {}
        }
    }

    /// The canonical form of the apex element's subtree, minus `exclude`.
    pub(crate) fn canonicalize(&self) -> String {
        let mut out = String::new();
        self.render(self.apex, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    fn c14n(xml: &str) -> String {
        let doc = roxmltree::Document::parse(xml).unwrap();
        Subset {
            apex: doc.root_element(),
            exclude: None,
            source: xml,
        }
        .canonicalize()
    }

    #[test]
    fn sorts_attributes_and_expands_empty_elements() {
        assert_eq!(
            c14n(r#"<a xmlns:z="urn:z" b="2" a="1" z:c="3"><e/></a>"#),
            r#"<a xmlns:z="urn:z" a="1" b="2" z:c="3"><e></e></a>"#
        );
    }

    #[test]
    fn escapes_and_drops_comments() {
        assert_eq!(
            c14n("<a t='x&quot;y'><!-- no -->1 &lt; 2 &amp; 3 &gt; 0</a>"),
            r#"<a t="x&quot;y">1 &lt; 2 &amp; 3 &gt; 0</a>"#
        );
    }

    #[test]
    fn declares_namespaces_once() {
        assert_eq!(
            c14n(r#"<a xmlns="urn:d" xmlns:p="urn:p"><p:b xmlns:p="urn:p"/></a>"#),
            r#"<a xmlns="urn:d" xmlns:p="urn:p"><p:b></p:b></a>"#
        );
    }
}
