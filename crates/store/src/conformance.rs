//! The behaviour every [`Store`] must have. Each implementation's tests call [`run`]: the
//! memory store, the SQLite store (also with folds every millisecond and with none) and the
//! PostgreSQL store (against a real server of the test's own, `switchboard_testkit::servers`).
//! [`documents`] is the same for the shared documents.

use crate::{now_ms, Claim, EventRecord, SessionRecord, Store, StoreError};

fn session(id: &str, updated_ms: u64) -> SessionRecord {
    SessionRecord {
        archived: false,
        node: None,
        id: id.to_owned(),
        claude_session_id: None,
        cwd: "/work".to_owned(),
        model: None,
        permission_mode: None,
        state: crate::RecordState::Starting,
        title: Some(format!("session {id}")),
        cost_usd: 0.0,
        spent_usd: 0.25,
        created_ms: updated_ms,
        updated_ms,
        launch: crate::Launch {
            cwd: "/work".into(),
            model: Some("m".into()),
            ..Default::default()
        },
    }
}

fn event(session_id: &str, seq: u64, payload: &str) -> EventRecord {
    EventRecord {
        session_id: session_id.to_owned(),
        seq,
        ts_ms: now_ms(),
        dir: "from_cli".into(),
        kind: "line".into(),
        payload: payload.to_owned(),
    }
}

/// Runs every check against `store`, which must be empty. Panics on the first failure.
pub async fn run(store: &dyn Store) {
    sessions(store).await;
    append_and_read(store).await;
    sequence_is_enforced(store).await;
    delete_removes_events(store).await;
    outbox(store).await;
    search(store).await;
    view_checkpoints(store).await;
}

/// The checks of a store's shared [`crate::Documents`]: written from version 0, then only
/// from the version read; two writers from one version, one wins.
pub async fn documents(store: &dyn crate::Documents) {
    assert_eq!(store.document("tokens").await.unwrap(), None);
    assert!(store.put_document("tokens", "one", 0).await.unwrap(), "the first write");
    assert!(!store.put_document("tokens", "again", 0).await.unwrap(), "created once");
    let read = store.document("tokens").await.unwrap().unwrap();
    assert_eq!(read, crate::Document { text: "one".into(), version: 1 });
    assert!(store.put_document("tokens", "two", 1).await.unwrap());
    assert!(!store.put_document("tokens", "stale", 1).await.unwrap(), "a stale version loses");
    assert!(!store.put_document("tokens", "ahead", 7).await.unwrap(), "so does one ahead");
    let read = store.document("tokens").await.unwrap().unwrap();
    assert_eq!(read, crate::Document { text: "two".into(), version: 2 });
    assert_eq!(store.document("link-key").await.unwrap(), None, "documents are apart");
    // Two writers read version 2; one writes, the other finds it moved on, reads it again
    // and redoes its change: both changes are kept.
    let (a, b) = (store.document("tokens").await.unwrap(), store.document("tokens").await.unwrap());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(store.put_document("tokens", &format!("{}+a", a.text), a.version).await.unwrap());
    assert!(!store.put_document("tokens", &format!("{}+b", b.text), b.version).await.unwrap());
    let b = store.document("tokens").await.unwrap().unwrap();
    assert!(store.put_document("tokens", &format!("{}+b", b.text), b.version).await.unwrap());
    let read = store.document("tokens").await.unwrap().unwrap();
    assert_eq!(read, crate::Document { text: "two+a+b".into(), version: 4 });
}

async fn outbox(store: &dyn Store) {
    use crate::NewOutboxItem;
    let item = |channel: &str, key: &str| NewOutboxItem {
        channel: channel.into(),
        key: key.into(),
        body: format!("{{\"key\":\"{key}\"}}"),
    };
    assert!(store.outbox("hooks", 10).await.unwrap().is_empty());
    store
        .enqueue_outbox(&[item("hooks", "k1"), item("phone", "k1"), item("hooks", "k2")])
        .await
        .unwrap();
    // The same key again while it waits is not queued twice.
    store.enqueue_outbox(&[item("hooks", "k1"), item("hooks", "k3")]).await.unwrap();
    let waiting = store.outbox("hooks", 10).await.unwrap();
    let keys: Vec<&str> = waiting.iter().map(|item| item.key.as_str()).collect();
    assert_eq!(keys, ["k1", "k2", "k3"], "in queue order, per channel");
    assert!(waiting.windows(2).all(|pair| pair[0].id < pair[1].id));
    assert_eq!(waiting[1].body, "{\"key\":\"k2\"}");
    assert_eq!(store.outbox("hooks", 2).await.unwrap().len(), 2, "at most the limit");
    store.outbox_done(waiting[0].id).await.unwrap();
    let keys: Vec<String> =
        store.outbox("hooks", 10).await.unwrap().into_iter().map(|item| item.key).collect();
    assert_eq!(keys, ["k2", "k3"]);
    assert_eq!(store.outbox("phone", 10).await.unwrap().len(), 1, "other channels keep theirs");
    assert_eq!(store.outbox_channels().await.unwrap(), ["hooks", "phone"]);
    store.outbox_forget("hooks").await.unwrap();
    assert_eq!(store.outbox_channels().await.unwrap(), ["phone"]);
    assert!(store.outbox("hooks", 10).await.unwrap().is_empty(), "a forgotten channel's are gone");
    assert_eq!(store.outbox("phone", 10).await.unwrap().len(), 1, "only that channel's");
}

async fn sessions(store: &dyn Store) {
    store.create_session(&session("a", 10)).await.unwrap();
    store.create_session(&session("b", 20)).await.unwrap();
    assert!(store.create_session(&session("a", 30)).await.is_err(), "ids are unique");
    let listed: Vec<String> =
        store.list_sessions().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, ["b", "a"], "most recently updated first");
    let mut a = store.get_session("a").await.unwrap().unwrap();
    assert_eq!(a, session("a", 10), "a record reads back as written");
    a.state = crate::RecordState::Idle;
    a.cost_usd = 0.125;
    a.claude_session_id = Some("claude-1".into());
    a.updated_ms = 40;
    a.archived = true;
    store.update_session(&a).await.unwrap();
    assert_eq!(store.get_session("a").await.unwrap().unwrap(), a);
    assert_eq!(store.list_sessions().await.unwrap()[0].id, "a");
    assert!(matches!(
        store.update_session(&session("nope", 1)).await,
        Err(StoreError::NotFound(_))
    ));
    // Nodes: only a claim moves a session; of two claims made from one reading one wins, even
    // when one is its own node's (resuming it); a node that lost it cannot write it back.
    let read = store.get_session("a").await.unwrap().unwrap();
    assert!(store.claim_session(Claim::of(&read, Some("node-1"))).await.unwrap());
    let second = store.claim_session(Claim::of(&read, Some("node-2"))).await.unwrap();
    assert!(!second, "the record changed since it was read");
    a = store.get_session("a").await.unwrap().unwrap();
    assert_eq!(a.node.as_deref(), Some("node-1"));
    assert!(a.updated_ms > 40, "a claim stamps the record");
    a.title = Some("on node 1".into());
    store.update_session(&a).await.unwrap();
    assert_eq!(store.get_session("a").await.unwrap().unwrap(), a);
    let read = store.get_session("a").await.unwrap().unwrap();
    assert!(store.claim_session(Claim::of(&read, Some("node-1"))).await.unwrap(), "its own");
    let other = store.claim_session(Claim::of(&read, Some("node-2"))).await.unwrap();
    assert!(!other, "its own node's claim came first");
    let read = store.get_session("a").await.unwrap().unwrap();
    assert!(store.claim_session(Claim::of(&read, Some("node-2"))).await.unwrap());
    let moved = store.update_session(&a).await.unwrap_err();
    assert!(
        matches!(&moved, StoreError::Moved { node: Some(node), .. } if node == "node-2"),
        "{moved}"
    );
    assert_eq!(store.get_session("a").await.unwrap().unwrap().node.as_deref(), Some("node-2"));
    let nobody = Claim { id: "nope", from: None, seen_ms: 0, to: Some("node-1"), stamp_ms: 1 };
    assert!(matches!(store.claim_session(nobody).await, Err(StoreError::NotFound(_))));
    let read = store.get_session("a").await.unwrap().unwrap();
    assert!(store.claim_session(Claim::of(&read, None)).await.unwrap());
    assert_eq!(store.get_session("nope").await.unwrap(), None);
}

async fn append_and_read(store: &dyn Store) {
    assert_eq!(store.last_seq("a").await.unwrap(), 0);
    // Payloads are opaque: not even JSON is required, and bytes come back exactly.
    let odd = "{\"x\":\"é\\n\u{1F600}\"} not json at all";
    store.append(&[event("a", 1, "{}"), event("a", 2, odd), event("b", 1, "{}")]).await.unwrap();
    store.append(&(3..=100).map(|seq| event("a", seq, "{}")).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(store.last_seq("a").await.unwrap(), 100);
    assert_eq!(store.last_seq("b").await.unwrap(), 1);
    let all = store.events_after("a", 0, 1000).await.unwrap();
    assert_eq!(all.len(), 100);
    assert!(all.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1), "in order, no gaps");
    assert_eq!(all[1].payload, odd);
    let page = store.events_after("a", 50, 10).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), (51..=60).collect::<Vec<_>>());
    assert!(store.events_after("a", 100, 10).await.unwrap().is_empty());
    // Near 2^64 nothing wraps around to the start of the log.
    for after in [i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX - 1, u64::MAX] {
        assert!(store.events_after("a", after, 10).await.unwrap().is_empty(), "after={after}");
    }
    assert!(store.events_after("missing", 0, 10).await.unwrap().is_empty());
    // Paging back: the last `limit` before a seq, in order.
    let seqs = |page: Vec<crate::EventRecord>| page.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(store.events_before("a", 51, 10).await.unwrap()),
        (41..=50).collect::<Vec<_>>()
    );
    assert_eq!(seqs(store.events_before("a", 4, 10).await.unwrap()), vec![1, 2, 3]);
    assert_eq!(seqs(store.events_before("a", u64::MAX, 2).await.unwrap()), vec![99, 100]);
    assert!(store.events_before("a", 1, 10).await.unwrap().is_empty());
    assert!(store.events_before("missing", 10, 10).await.unwrap().is_empty());
    store.append(&[]).await.unwrap();
    // Shared records are stored like any others, sequence checked the same way.
    let shared: Vec<std::sync::Arc<EventRecord>> =
        (1..=3).map(|seq| std::sync::Arc::new(event("shared", seq, "{}"))).collect();
    store.append_shared(&shared).await.unwrap();
    assert!(store.append_shared(&shared[2..]).await.is_err(), "seq 3 again");
    assert_eq!(store.events_after("shared", 0, 10).await.unwrap().len(), 3);
}

async fn sequence_is_enforced(store: &dyn Store) {
    store.create_session(&session("c", 50)).await.unwrap();
    let gap = store.append(&[event("c", 2, "{}")]).await.unwrap_err();
    assert!(matches!(gap, StoreError::OutOfSequence { seq: 2, last: 0, .. }), "{gap}");
    store.append(&[event("c", 1, "{}")]).await.unwrap();
    let duplicate = store.append(&[event("c", 1, "{}")]).await.unwrap_err();
    assert!(matches!(duplicate, StoreError::OutOfSequence { .. }));
    // A bad batch writes nothing, not even its good first part.
    assert!(store.append(&[event("c", 2, "{}"), event("c", 4, "{}")]).await.is_err());
    assert_eq!(store.last_seq("c").await.unwrap(), 1);
}

async fn delete_removes_events(store: &dyn Store) {
    store.delete_session("b").await.unwrap();
    assert_eq!(store.get_session("b").await.unwrap(), None);
    assert!(store.events_after("b", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.last_seq("b").await.unwrap(), 0);
    assert!(store.get_session("a").await.unwrap().is_some(), "others stay");
}

fn entry(session: &str, seq: u64, kind: crate::EntryKind) -> crate::SearchEntry {
    crate::SearchEntry {
        session_id: session.to_owned(),
        origin: Some("api".into()),
        token: Some("admin".into()),
        model: Some("claude-a".into()),
        project: "/work/app".into(),
        ..crate::SearchEntry::new(kind, seq, 1_000 + seq, String::new())
    }
}

/// The search index: every filter, pages, groups, marks, an entry written twice kept once, and
/// a deleted session's entries gone.
async fn search(store: &dyn Store) {
    use crate::{EntryKind, GroupBy, SearchQuery, Touched};
    let index = store.search_index().expect("a search index");
    let (a, b) = ("search-a", "search-b");
    store.create_session(&session(a, 1)).await.unwrap();
    store.create_session(&session(b, 1)).await.unwrap();
    let prompt = crate::SearchEntry {
        text: "Tidy the deploy script, then say \"done\"".into(),
        ..entry(a, 1, EntryKind::Prompt)
    };
    let edit = crate::SearchEntry {
        tool: Some("Edit".into()),
        tool_use_id: Some("t1".into()),
        paths: vec![Touched { path: "/work/app/scripts/deploy.sh".into(), wrote: true }],
        text: "/work/app/scripts/deploy.sh set -eu".into(),
        written: Some("set -eu\n".into()),
        ..entry(a, 2, EntryKind::ToolCall)
    };
    let shell = crate::SearchEntry {
        tool: Some("Bash".into()),
        tool_use_id: Some("t2".into()),
        command: Some("rm -rf build && cat deploy.sh".into()),
        paths: vec![Touched { path: "/work/other/deploy.sh".into(), wrote: false }],
        text: "rm -rf build && cat deploy.sh".into(),
        origin: Some("schedule".into()),
        run: Some("schedule:nightly".into()),
        worktree: true,
        project: "/work/other".into(),
        ..entry(b, 1, EntryKind::ToolCall)
    };
    let denied = crate::SearchEntry {
        tool: Some("Bash".into()),
        tool_use_id: Some("t2".into()),
        decision: Some("deny".into()),
        decided_by: Some("person".into()),
        who: Some("ana (web)".into()),
        text: "not the build folder".into(),
        place: 1,
        ..shell.clone()
    };
    let turn = crate::SearchEntry { cost_usd: 0.5, ..entry(a, 3, EntryKind::Turn) };
    let other_turn = crate::SearchEntry {
        cost_usd: 0.25,
        model: Some("claude-b".into()),
        project: "/work/other".into(),
        ts_ms: 1_000 + 2 * 86_400_000,
        ..entry(b, 2, EntryKind::Turn)
    };
    index
        .index(
            &[prompt.clone(), edit.clone(), shell.clone(), denied.clone(), turn.clone()],
            &[(a.to_owned(), 3), (b.to_owned(), 1)],
        )
        .await
        .unwrap();
    // Again, and one more: each kept once, the marks only move on.
    index
        .index(&[edit.clone(), other_turn.clone()], &[(a.to_owned(), 2), (b.to_owned(), 2)])
        .await
        .unwrap();
    let marks = index.marks().await.unwrap();
    assert_eq!((marks.get(a), marks.get(b)), (Some(&3), Some(&2)), "{marks:?}");
    let find = |query: SearchQuery| async move {
        let hits = index.search(&SearchQuery { limit: 50, ..query }).await.unwrap();
        hits.iter()
            .map(|hit| (hit.entry.session_id.clone(), hit.entry.seq, hit.entry.place))
            .collect::<Vec<_>>()
    };
    let all = find(SearchQuery::default()).await;
    assert_eq!(all.len(), 6, "{all:?}");
    assert_eq!(all[0], (b.to_owned(), 2, 0), "newest first");
    assert_eq!(
        find(SearchQuery { tool: Some("Edit".into()), ..Default::default() }).await,
        [(a.to_owned(), 2, 0)]
    );
    // A file by name, by a path's tail, by its whole path; only what wrote it.
    let by_name = find(SearchQuery { path: Some("deploy.sh".into()), ..Default::default() }).await;
    assert_eq!(by_name.len(), 3, "{by_name:?}");
    let tail =
        find(SearchQuery { path: Some("scripts/deploy.sh".into()), ..Default::default() }).await;
    assert_eq!(tail, [(a.to_owned(), 2, 0)]);
    let whole =
        find(SearchQuery { path: Some("/work/other/deploy.sh".into()), ..Default::default() })
            .await;
    assert_eq!(whole.len(), 2, "{whole:?}");
    assert!(
        find(SearchQuery { path: Some("ripts/deploy.sh".into()), ..Default::default() })
            .await
            .is_empty(),
        "a tail is whole names"
    );
    let wrote =
        find(SearchQuery { path: Some("deploy.sh".into()), wrote: true, ..Default::default() })
            .await;
    assert_eq!(wrote, [(a.to_owned(), 2, 0)]);
    // A command's word (not part of one), decisions, who, origin, runs, worktrees, projects.
    assert_eq!(
        find(SearchQuery {
            command: Some("rm".into()),
            kind: Some(EntryKind::ToolCall),
            ..Default::default()
        })
        .await,
        [(b.to_owned(), 1, 0)]
    );
    assert!(find(SearchQuery { command: Some("r".into()), ..Default::default() }).await.is_empty());
    let denials = SearchQuery {
        decision: Some("deny".into()),
        decided_by: Some("person".into()),
        ..Default::default()
    };
    assert_eq!(find(denials.clone()).await, [(b.to_owned(), 1, 1)]);
    assert_eq!(find(SearchQuery { who: Some("ana".into()), ..denials.clone() }).await.len(), 1);
    assert!(
        find(SearchQuery { who: Some("bo%".into()), ..denials.clone() }).await.is_empty(),
        "LIKE's signs are plain"
    );
    assert_eq!(
        find(SearchQuery { run: Some("schedule".into()), ..denials.clone() }).await.len(),
        1
    );
    assert_eq!(
        find(SearchQuery { run: Some("schedule:nightly".into()), ..denials.clone() }).await.len(),
        1
    );
    assert!(find(SearchQuery { run: Some("schedule:weekly".into()), ..denials.clone() })
        .await
        .is_empty());
    assert_eq!(
        find(SearchQuery { origin: Some("schedule".into()), ..Default::default() }).await.len(),
        2
    );
    assert_eq!(find(SearchQuery { worktree: Some(true), ..Default::default() }).await.len(), 2);
    assert_eq!(
        find(SearchQuery { project: Some("/work/app/".into()), ..Default::default() }).await.len(),
        3
    );
    assert_eq!(
        find(SearchQuery { project: Some("/work".into()), ..Default::default() }).await.len(),
        6
    );
    assert!(find(SearchQuery { project: Some("/work/ap".into()), ..Default::default() })
        .await
        .is_empty());
    // Words, any case, every one; a phrase's words in order; signs alone find nothing to look up.
    assert_eq!(
        find(SearchQuery { words: vec!["DEPLOY".into(), "tidy".into()], ..Default::default() })
            .await,
        [(a.to_owned(), 1, 0)]
    );
    assert_eq!(
        find(SearchQuery { words: vec!["say done".into()], ..Default::default() }).await.len(),
        1
    );
    assert!(find(SearchQuery { words: vec!["done say".into()], ..Default::default() })
        .await
        .is_empty());
    // A word of a path or a file's name is a word, as in a prompt; text comparisons are exact
    // in case.
    assert_eq!(
        find(SearchQuery { words: vec!["deploy".into()], ..Default::default() }).await.len(),
        3
    );
    assert_eq!(
        find(SearchQuery { words: vec!["deploy.sh".into()], ..Default::default() }).await.len(),
        2
    );
    assert!(find(SearchQuery { who: Some("ANA".into()), ..Default::default() }).await.is_empty());
    assert!(find(SearchQuery { project: Some("/Work".into()), ..Default::default() })
        .await
        .is_empty());
    assert!(find(SearchQuery { command: Some("RM".into()), ..Default::default() })
        .await
        .is_empty());
    assert_eq!(find(SearchQuery { words: vec!["\"".into()], ..Default::default() }).await.len(), 6);
    // Time, cost, session, model.
    assert_eq!(
        find(SearchQuery { since_ms: Some(1_003), until_ms: Some(2_000), ..Default::default() })
            .await,
        [(a.to_owned(), 3, 0)]
    );
    assert_eq!(
        find(SearchQuery { min_cost_usd: Some(0.3), ..Default::default() }).await,
        [(a.to_owned(), 3, 0)]
    );
    assert_eq!(
        find(SearchQuery {
            session_id: Some(b.into()),
            model: Some("claude-b".into()),
            ..Default::default()
        })
        .await,
        [(b.to_owned(), 2, 0)]
    );
    // Pages: from the last hit on, none twice.
    let first = index.search(&SearchQuery { limit: 4, ..Default::default() }).await.unwrap();
    let rest = index
        .search(&SearchQuery {
            limit: 4,
            before: Some(first.last().unwrap().cursor()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((first.len(), rest.len()), (4, 2));
    assert!(rest.iter().all(|hit| first.iter().all(|seen| seen.id != hit.id)));
    // A hit shows what was written only when asked (blame), and its text cut.
    assert_eq!(
        first.iter().find(|hit| hit.entry.tool.as_deref() == Some("Edit")).unwrap().entry.written,
        None
    );
    let asked =
        SearchQuery { path: Some("deploy.sh".into()), wrote: true, limit: 5, ..Default::default() };
    let searched = index.search(&asked).await.unwrap();
    assert_eq!(searched[0].entry.written, None, "a search never carries what a call wrote");
    let blamed = index.search(&SearchQuery { with_written: true, ..asked }).await.unwrap();
    assert_eq!(blamed[0].entry.written.as_deref(), Some("set -eu\n"));
    assert_eq!(blamed[0].entry.paths, edit.paths);
    // Groups: cost by project, by day; entries by tool.
    let turns = SearchQuery { kind: Some(EntryKind::Turn), ..Default::default() };
    let projects = index.group(&turns, GroupBy::Project).await.unwrap();
    assert_eq!(
        projects.iter().map(|g| (g.key.clone(), g.entries, g.cost_usd)).collect::<Vec<_>>(),
        [(Some("/work/app".into()), 1, 0.5), (Some("/work/other".into()), 1, 0.25)]
    );
    let days = index.group(&turns, GroupBy::Day).await.unwrap();
    assert_eq!(
        days.iter().map(|g| g.key.clone().unwrap()).collect::<Vec<_>>(),
        ["1970-01-01", "1970-01-03"]
    );
    let tools = index.group(&SearchQuery::default(), GroupBy::Tool).await.unwrap();
    assert_eq!(
        tools.iter().map(|g| (g.key.clone(), g.entries)).collect::<Vec<_>>(),
        [(None, 3), (Some("Bash".into()), 2), (Some("Edit".into()), 1)]
    );
    // A deleted session's entries and mark go with it.
    store.delete_session(a).await.unwrap();
    assert!(find(SearchQuery { session_id: Some(a.into()), ..Default::default() })
        .await
        .is_empty());
    assert!(find(SearchQuery { words: vec!["tidy".into()], ..Default::default() })
        .await
        .is_empty());
    assert!(find(SearchQuery { path: Some("scripts/deploy.sh".into()), ..Default::default() })
        .await
        .is_empty());
    assert_eq!(index.marks().await.unwrap().get(a), None);
    store.delete_session(b).await.unwrap();
}

/// Checkpoints of a view: the nearest at or before a place in the format asked, a place
/// written again kept as it was unless its event time or format differs, none for a session
/// that is gone, each session's latest in a format, and a deleted session's gone with it.
async fn view_checkpoints(store: &dyn Store) {
    use crate::ViewCheckpoint;
    let kept = store.view_checkpoints().expect("view checkpoints");
    let (a, b) = ("views-a", "views-b");
    store.create_session(&session(a, 1)).await.unwrap();
    store.create_session(&session(b, 1)).await.unwrap();
    let at = |seq: u64, state: &[u8]| ViewCheckpoint {
        seq,
        ts_ms: 100 + seq,
        format: "f1".into(),
        state: state.to_vec(),
    };
    assert_eq!(kept.view_checkpoint(a, u64::MAX, "f1").await.unwrap(), None);
    kept.put_view_checkpoint(a, &at(2048, b"one")).await.unwrap();
    kept.put_view_checkpoint(a, &at(4096, &[0, 255, 1])).await.unwrap();
    kept.put_view_checkpoint(b, &at(2048, b"b")).await.unwrap();
    kept.put_view_checkpoint("views-gone", &at(2048, b"x")).await.unwrap();
    // Written again as it was kept: left as it is.
    kept.put_view_checkpoint(a, &at(2048, b"same place, same time")).await.unwrap();
    assert_eq!(kept.view_checkpoint(a, 2047, "f1").await.unwrap(), None);
    assert_eq!(kept.view_checkpoint(a, 2048, "f1").await.unwrap(), Some(at(2048, b"one")));
    assert_eq!(kept.view_checkpoint(a, 4095, "f1").await.unwrap(), Some(at(2048, b"one")));
    assert_eq!(
        kept.view_checkpoint(a, u64::MAX, "f1").await.unwrap(),
        Some(at(4096, &[0, 255, 1]))
    );
    assert_eq!(kept.view_checkpoint("views-gone", u64::MAX, "f1").await.unwrap(), None);
    // Another event time, or another format, at a place: replaced.
    let later = ViewCheckpoint { ts_ms: 7, ..at(2048, b"another log") };
    kept.put_view_checkpoint(a, &later).await.unwrap();
    assert_eq!(kept.view_checkpoint(a, 4095, "f1").await.unwrap(), Some(later));
    let other = ViewCheckpoint { format: "f2".into(), ..at(4096, b"another build") };
    kept.put_view_checkpoint(a, &other).await.unwrap();
    assert_eq!(kept.view_checkpoint(a, u64::MAX, "f2").await.unwrap(), Some(other));
    assert_eq!(kept.view_checkpoint(a, u64::MAX, "f1").await.unwrap().map(|c| c.seq), Some(2048));
    let marks = kept.view_checkpoint_marks("f1").await.unwrap();
    assert_eq!(
        (marks.get(a), marks.get(b), marks.get("views-gone")),
        (Some(&2048), Some(&2048), None)
    );
    assert_eq!(kept.view_checkpoint_marks("f2").await.unwrap().get(a), Some(&4096));
    store.delete_session(a).await.unwrap();
    assert_eq!(kept.view_checkpoint(a, u64::MAX, "f1").await.unwrap(), None);
    assert_eq!(kept.view_checkpoint(a, u64::MAX, "f2").await.unwrap(), None);
    assert_eq!(kept.view_checkpoint(b, u64::MAX, "f1").await.unwrap(), Some(at(2048, b"b")));
    assert_eq!(kept.view_checkpoint_marks("f1").await.unwrap().get(a), None);
    store.delete_session(b).await.unwrap();
}
