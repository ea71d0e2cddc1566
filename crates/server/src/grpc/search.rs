//! Search and blame over gRPC (`Search`, `Blame`): the same answers as REST
//! (`Daemon::search_answer`, `Daemon::blame_answer`), mapped to the `.proto`'s messages here.

use tonic::Status;

use super::{pb, status, Api};

pub(super) async fn search(
    api: &Api,
    request: tonic::Request<pb::SearchRequest>,
) -> Result<tonic::Response<pb::SearchResponse>, Status> {
    let request = request.into_inner();
    let limit = request.limit.map(|limit| limit as usize);
    let answer = api
        .daemon
        .search_answer(&request.query, limit, request.before.as_deref())
        .await
        .map_err(status)?;
    Ok(tonic::Response::new(pb::SearchResponse {
        hits: answer.hits.into_iter().map(|hit| found(hit.hit, hit.title)).collect(),
        next: answer.next,
        groups: answer
            .groups
            .unwrap_or_default()
            .into_iter()
            .map(|group| pb::SearchGroup {
                key: group.key,
                entries: group.entries,
                cost_usd: group.cost_usd,
            })
            .collect(),
        behind: u32::try_from(answer.behind).unwrap_or(u32::MAX),
    }))
}

pub(super) async fn blame(
    api: &Api,
    request: tonic::Request<pb::BlameRequest>,
) -> Result<tonic::Response<pb::BlameResponse>, Status> {
    let request = request.into_inner();
    let answer = api
        .daemon
        .blame_answer(&request.path, &request.line, request.tail.as_deref())
        .await
        .map_err(status)?;
    Ok(tonic::Response::new(match answer.found {
        Some(blamed) => pb::BlameResponse {
            call: Some(found(blamed.call, blamed.title.clone())),
            prompt: blamed.prompt.map(|prompt| found(prompt, blamed.title)),
        },
        None => pb::BlameResponse { call: None, prompt: None },
    }))
}

/// A hit as the `.proto` has it.
fn found(hit: switchboard_store::SearchHit, title: Option<String>) -> pb::SearchHit {
    let entry = hit.entry;
    pb::SearchHit {
        id: hit.id,
        session_id: entry.session_id,
        seq: entry.seq,
        place: entry.place,
        ts_ms: entry.ts_ms,
        kind: entry.kind.as_str().to_owned(),
        tool: entry.tool,
        tool_use_id: entry.tool_use_id,
        paths: entry
            .paths
            .into_iter()
            .map(|touched| pb::TouchedFile { path: touched.path, wrote: touched.wrote })
            .collect(),
        command: entry.command,
        decision: entry.decision,
        decided_by: entry.decided_by,
        who: entry.who,
        origin: entry.origin,
        token: entry.token,
        run: entry.run,
        model: entry.model,
        project: entry.project,
        node: entry.node,
        worktree: entry.worktree,
        cost_usd: entry.cost_usd,
        text: entry.text,
        title,
    }
}
