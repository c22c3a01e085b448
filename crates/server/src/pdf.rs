//! The exit report as PDF (`knox report --pdf`, the report page's button): the same
//! content as the HTML report, laid out on A4 pages in the PDF standard fonts
//! (Helvetica, WinAnsi encoding: nothing to embed, nothing read at run time), written
//! with `pdf-writer`. Every run line links back to its run page (and names its bundle
//! digest), so every figure can be traced to the evidence it came from.

use pdf_writer::types::{ActionType, AnnotationType};
use pdf_writer::{Content, Finish, Name, Pdf, Rect, Ref, Str, TextStr};

use crate::store::{Dashboard, RunRow};
use crate::tlog::TreeHead;

/// A4, in points.
const PAGE: (f32, f32) = (595.0, 842.0);
/// Left/right and top/bottom margins.
const MARGIN: f32 = 56.0;
/// Body text size and line height.
const SIZE: f32 = 9.5;
const LEADING: f32 = 13.0;
/// Characters per line at [`SIZE`]: Helvetica's widest common glyphs are about 0.6 em
/// wide, so this never overflows the text column.
const COLUMN: usize = 84;

/// One laid-out line.
#[derive(Debug, Clone)]
struct Line {
    text: Vec<u8>,
    bold: bool,
    size: f32,
    /// A link target for the line, when it names a run.
    link: Option<String>,
}

/// A document being laid out: lines of text, wrapped to the column.
#[derive(Debug, Default)]
struct Doc {
    lines: Vec<Line>,
}

impl Doc {
    fn heading(&mut self, text: &str) {
        self.blank();
        self.lines.push(Line {
            text: winansi(text),
            bold: true,
            size: 13.0,
            link: None,
        });
    }

    fn para(&mut self, text: &str) {
        self.push(text, None);
    }

    fn push(&mut self, text: &str, link: Option<String>) {
        for piece in wrap(text, COLUMN) {
            self.lines.push(Line {
                text: winansi(&piece),
                bold: false,
                size: SIZE,
                link: link.clone(),
            });
        }
    }

    fn blank(&mut self) {
        self.lines.push(Line {
            text: Vec::new(),
            bold: false,
            size: SIZE,
            link: None,
        });
    }

    /// Paginates and writes the PDF.
    fn write(&self, title: &str) -> Vec<u8> {
        let per_page = ((PAGE.1 - 2.0 * MARGIN) / LEADING) as usize;
        let pages: Vec<&[Line]> = self.lines.chunks(per_page.max(1)).collect();
        let mut next = 1;
        let mut id = || {
            next += 1;
            Ref::new(next)
        };
        let (catalog, tree, regular, bold, info) = (Ref::new(1), id(), id(), id(), id());
        let mut pdf = Pdf::new();
        pdf.catalog(catalog).pages(tree);
        pdf.document_info(info)
            .title(TextStr(title))
            .producer(TextStr("knox serve"));
        pdf.type1_font(regular)
            .base_font(Name(b"Helvetica"))
            .encoding_predefined(Name(b"WinAnsiEncoding"));
        pdf.type1_font(bold)
            .base_font(Name(b"Helvetica-Bold"))
            .encoding_predefined(Name(b"WinAnsiEncoding"));
        let mut kids = Vec::with_capacity(pages.len());
        for (n, lines) in pages.iter().enumerate() {
            let (page, content) = (id(), id());
            kids.push(page);
            let mut c = Content::new();
            let mut links = Vec::new();
            let mut y = PAGE.1 - MARGIN;
            for l in *lines {
                y -= LEADING;
                if l.text.is_empty() {
                    continue;
                }
                c.begin_text();
                c.set_font(Name(if l.bold { b"F2" } else { b"F1" }), l.size);
                c.next_line(MARGIN, y);
                c.show(Str(&l.text));
                c.end_text();
                if let Some(uri) = &l.link {
                    links.push((y, uri.clone()));
                }
            }
            footer(&mut c, n + 1, pages.len());
            pdf.stream(content, &c.finish());
            let annots: Vec<(Ref, f32, String)> =
                links.into_iter().map(|(y, u)| (id(), y, u)).collect();
            let mut p = pdf.page(page);
            p.media_box(Rect::new(0.0, 0.0, PAGE.0, PAGE.1))
                .parent(tree)
                .contents(content)
                .annotations(annots.iter().map(|a| a.0));
            p.resources()
                .fonts()
                .pair(Name(b"F1"), regular)
                .pair(Name(b"F2"), bold);
            p.finish();
            for (aid, y, uri) in &annots {
                let mut a = pdf.annotation(*aid);
                a.subtype(AnnotationType::Link).rect(Rect::new(
                    MARGIN,
                    y - 3.0,
                    PAGE.0 - MARGIN,
                    y + SIZE,
                ));
                a.action()
                    .action_type(ActionType::Uri)
                    .uri(Str(uri.as_bytes()));
                a.finish();
            }
        }
        let count = i32::try_from(kids.len()).unwrap_or(i32::MAX);
        pdf.pages(tree).kids(kids).count(count);
        pdf.finish()
    }
}

fn footer(c: &mut Content, n: usize, of: usize) {
    c.begin_text();
    c.set_font(Name(b"F1"), 8.0);
    c.next_line(MARGIN, MARGIN / 2.0);
    c.show(Str(&winansi(&format!(
        "Knox exit report, page {n} of {of}"
    ))));
    c.end_text();
}

/// Greedy word wrap to `width` characters (a longer word is cut).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word = word.to_owned();
        while word.chars().count() > width {
            if !line.is_empty() {
                out.push(std::mem::take(&mut line));
            }
            let cut: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            out.push(cut);
        }
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || out.is_empty() {
        out.push(line);
    }
    out
}

/// Text in the standard fonts' WinAnsi encoding: Latin-1 as is, the usual
/// typographic marks mapped, an arrow as `->`, anything else `?` (never dropped
/// silently, never a byte the font would misread).
fn winansi(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\u{2014}' => out.push(0x97),
            '\u{2013}' => out.push(0x96),
            '\u{2018}' => out.push(0x91),
            '\u{2019}' => out.push(0x92),
            '\u{201C}' => out.push(0x93),
            '\u{201D}' => out.push(0x94),
            '\u{2022}' => out.push(0x95),
            '\u{2026}' => out.push(0x85),
            '\u{2192}' => out.extend_from_slice(b"->"),
            '\t' => out.push(b' '),
            c if (' '..='~').contains(&c) || ('\u{A0}'..='\u{FF}').contains(&c) => {
                out.push(u8::try_from(u32::from(c)).unwrap_or(b'?'));
            }
            _ => out.push(b'?'),
        }
    }
    out
}

fn when(t: i64) -> String {
    crate::ui::when(t)
}

/// What the exit report covers.
#[derive(Debug)]
pub struct Report<'a> {
    /// Provider's name.
    pub provider: &'a str,
    /// Period, Unix seconds.
    pub from: i64,
    /// Period end.
    pub to: i64,
    /// The provider's runs in the period.
    pub rows: &'a [RunRow],
    /// Figures over them.
    pub dashboard: &'a Dashboard,
    /// The log's signed head when the report was made.
    pub head: Option<&'a TreeHead>,
    /// The server's URL (`http://HOST:PORT`), for the links back to each run; none when
    /// not known.
    pub base: Option<&'a str>,
    /// The provider's chains of runs, one per in-TEE key, as handed over by the end of
    /// the period.
    pub chains: &'a crate::chains::KeyChains,
}

/// The exit report as a PDF document.
pub fn report(r: &Report<'_>) -> Vec<u8> {
    let mut d = Doc::default();
    let rows = r.rows;
    d.lines.push(Line {
        text: winansi(&format!("Exit report \u{2014} {}", r.provider)),
        bold: true,
        size: 16.0,
        link: None,
    });
    d.blank();
    d.para(&format!(
        "Provider {}, period {} to {}.",
        r.provider,
        when(r.from),
        when(r.to)
    ));
    d.para("Regulation policy set and toolkit manifest: those embedded in this build of the verifier; each run's APM names their hashes (below, per run).");
    if let Some(h) = r.head {
        d.para(&format!(
            "Transparency log at the time of this report: {} entries, signed root {}.",
            h.tree_size, h.root
        ));
    }
    d.heading("Runs and their verification");
    let count = |o: &str| rows.iter().filter(|r| r.outcome == o).count();
    d.para(&format!(
        "{} runs; {} complete, {} prefix, {} tampered, {} refused; {} actions blocked; {} hardware-backed.",
        rows.len(),
        count("complete"),
        count("prefix"),
        count("tampered"),
        count("refused"),
        rows.iter().map(|r| r.blocked).sum::<i64>(),
        rows.iter().filter(|r| r.hardware_backed).count()
    ));
    for run in rows {
        d.blank();
        let link = r.base.map(|b| format!("{b}/runs/{}", run.digest));
        d.push(
            &format!(
                "{} \u{2014} {}, {} blocked, {} platform evidence ({}), submitted {}",
                run.run_id,
                run.outcome,
                run.blocked,
                run.platform,
                if run.hardware_backed {
                    "hardware-backed"
                } else {
                    "not hardware-backed"
                },
                when(run.submitted_at)
            ),
            link.clone(),
        );
        d.push(&format!("bundle sha256:{}", run.digest), link);
        let rep: serde_json::Value = serde_json::from_str(&run.report).unwrap_or_default();
        for m in rep
            .get("models")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            d.para(&format!("APM input: {}", m.as_str().unwrap_or_default()));
        }
    }
    for (title, bars) in [
        ("What was blocked, by tool", &r.dashboard.tools),
        ("By guard", &r.dashboard.guards),
        ("Regulation verdicts by provision", &r.dashboard.provisions),
    ] {
        d.heading(title);
        if bars.is_empty() {
            d.para("None.");
        }
        for (label, n) in bars {
            d.para(&format!("{n}  {label}"));
        }
    }
    d.heading("Incidents");
    let incidents: Vec<&RunRow> = rows.iter().filter(|r| r.outcome != "complete").collect();
    let reuses = crate::ui::approval_reuses(rows);
    for u in &reuses {
        let runs: Vec<&str> = u.runs.iter().map(|r| r.run_id.as_str()).collect();
        d.para(&format!(
            "approval token {} used by {} runs (a token is accepted once): {}",
            u.nonce,
            u.runs.len(),
            runs.join(", ")
        ));
    }
    if incidents.is_empty() && reuses.is_empty() {
        d.para("None: every run verified complete.");
    }
    for run in incidents {
        d.push(
            &format!(
                "{}: {}{}",
                run.run_id,
                run.outcome,
                run.reason
                    .as_deref()
                    .map(|x| format!(" \u{2014} {x}"))
                    .unwrap_or_default()
            ),
            r.base.map(|b| format!("{b}/runs/{}", run.digest)),
        );
    }
    d.heading("Runs left out (each key's chain of runs)");
    d.para(crate::ui::CHAINS_NOTE);
    if r.chains.chains.is_empty() {
        d.para("No run of format v3 (none carries a key chain).");
    }
    for c in &r.chains.chains {
        d.push(
            &format!(
                "{}{}",
                if c.has_gaps() { "GAP: " } else { "" },
                c.describe()
            ),
            None,
        );
    }
    d.write(&format!("Exit report \u{2014} {}", r.provider))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_word_within_the_column() {
        let text = "a ".repeat(100) + &"x".repeat(200);
        let lines = wrap(&text, 20);
        assert!(lines.iter().all(|l| l.chars().count() <= 20));
        assert_eq!(lines.concat().replace(' ', ""), text.replace(' ', ""));
    }

    #[test]
    fn winansi_maps_marks_and_never_emits_multibyte() {
        assert_eq!(winansi("a\u{2014}b \u{2192} é"), b"a\x97b -> \xe9");
        assert_eq!(winansi("日本"), b"??");
    }

    #[test]
    fn an_empty_report_is_one_page_pdf() {
        let d = Dashboard::default();
        let pdf = report(&Report {
            provider: "acme",
            from: 0,
            to: 86_400,
            rows: &[],
            dashboard: &d,
            head: None,
            base: None,
            chains: &crate::chains::KeyChains::default(),
        });
        assert!(pdf.starts_with(b"%PDF-"));
        let text = String::from_utf8_lossy(&pdf);
        assert!(text.contains("/Count 1"));
        // ASCII lines are literal strings in the (uncompressed) content stream.
        assert!(text.contains("(None: every run verified complete.) Tj"));
    }
}
