//! Unit tests of the daemon's registry and a session's run (`super`).

use super::*;

fn record() -> SessionRecord {
    SessionRecord {
        archived: false,
        node: None,
        id: "s".into(),
        claude_session_id: None,
        cwd: "/".into(),
        model: None,
        permission_mode: None,
        state: RecordState::Starting,
        title: None,
        cost_usd: 0.0,
        spent_usd: 0.0,
        created_ms: 0,
        updated_ms: 0,
        launch: Launch::default(),
    }
}

#[test]
fn a_finishing_run_never_ends_the_run_after_it() {
    let live = LiveSession::new(record());
    let first = live.begin(None).unwrap();
    assert!(!*live.finished.borrow());
    // A resume begins the next run while the first run's pump is still finishing.
    let second = live.begin(None).unwrap();
    assert_eq!((first, second), (1, 2));
    // The first pump's end changes nothing: the second run goes on.
    assert!(!live.end(first));
    assert!(!*live.finished.borrow(), "the resumed run was marked finished");
    assert_eq!(live.run_number(), second);
    // Its own end does end it, once.
    assert!(live.end(second));
    assert!(*live.finished.borrow());
    assert!(!live.end(first));
}

#[test]
fn daemon_failures_are_server_errors_not_the_callers() {
    let internal = crate::ApiError::from(DaemonError::Internal("poisoned".into()));
    assert_eq!(internal.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let store = crate::ApiError::from(DaemonError::Store(StoreError::Closed));
    assert_eq!(store.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let draining = crate::ApiError::from(DaemonError::ShuttingDown);
    assert_eq!(draining.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
}
