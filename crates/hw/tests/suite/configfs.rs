//! configfs-tsm client against fake trees in a temporary directory: absent interface, and entry clean-up when the provider is missing.

use knox_hw::tdx::{CollectError, ConfigfsTsm};

#[test]
fn absent_interface_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let tsm = ConfigfsTsm::new(dir.path().join("sys/kernel/config/tsm/report"));
    let err = tsm.quote(&[0; 64]).unwrap_err();
    assert!(matches!(err, CollectError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("configfs-tsm report interface not found")
    );
}

#[test]
fn entry_is_removed_when_the_request_fails() {
    // A plain directory accepts mkdir but, unlike configfs, populates no
    // attributes: reading `provider` fails and the entry must be cleaned up.
    let dir = tempfile::tempdir().unwrap();
    let err = ConfigfsTsm::new(dir.path()).quote(&[0; 64]).unwrap_err();
    assert!(matches!(err, CollectError::Io { .. }), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn read_only_root_is_an_io_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = ConfigfsTsm::new(&file).quote(&[0; 64]).unwrap_err();
    assert!(matches!(err, CollectError::Unavailable { .. }), "{err}");
}
