//! Stands in for the llama.cpp engine in builds without the `local` feature: it can
//! never be constructed, and loading says which feature is missing.

use std::path::Path;

use knox_types::bundle::{ModelInfo, ModelRole};
use knox_types::digest::Digest;

use super::{InferenceStats, LocalOptions};
use crate::chat::{Chat, Format, Message, ModelError, Reply};

/// A local model; this build cannot load one.
#[derive(Debug)]
pub struct LocalModel {
    never: std::convert::Infallible,
}

impl LocalModel {
    /// Refuses: this build has no llama.cpp.
    pub fn load(name: &str, _: &Path, _: LocalOptions) -> Result<Self, ModelError> {
        Err(ModelError::Spec {
            spec: name.into(),
            why: "this knox was built without local models; rebuild with `--features knox/local` \
                  (needs cmake, libclang and a C++ compiler)"
                .into(),
        })
    }

    /// The weights file.
    pub fn path(&self) -> &Path {
        match self.never {}
    }

    /// SHA-256 of the weights file.
    pub fn weights(&self) -> Digest {
        match self.never {}
    }

    /// Inference figures so far.
    pub fn stats(&self) -> InferenceStats {
        match self.never {}
    }
}

impl Chat for LocalModel {
    fn complete(&self, _: &[Message], _: &Format) -> Result<Reply, ModelError> {
        match self.never {}
    }

    fn info(&self, _: ModelRole) -> ModelInfo {
        match self.never {}
    }
}
