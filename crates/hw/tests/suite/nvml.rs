//! NVML collection on a host without the NVIDIA driver: a clear error, never a panic.

use knox_hw::nvidia::{self, CollectError};

#[test]
fn collection_without_nvml_is_a_clear_error() {
    match nvidia::collect(&[0; 32]) {
        Err(CollectError::NvmlUnavailable(e)) => {
            let message = CollectError::NvmlUnavailable(e).to_string();
            assert!(message.starts_with("nvml is not available"), "{message}");
        }
        // A host with a driver answers otherwise (no CC mode, or evidence);
        // there is nothing to assert about it off a confidential GPU.
        other => eprintln!("nvml present on this host: {other:?}"),
    }
}
