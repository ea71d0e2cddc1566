//! The tasks a session runs in the background, read once: a Bash command run in the
//! background, a subagent started with `run_in_background` (2.1.250 and newer list them whole
//! in each `system/background_tasks_changed`), and how each ended (`task_notification`). Each
//! may be stopped alone (`stop_task`); the view lists the ones still running.

use serde::{Deserialize, Serialize};
use switchboard_protocol::system::{BackgroundTasksChanged, TaskEvent};

use super::{cut, notice, Level, NoticeKind, Projector, Update};

/// The most tasks the view lists.
pub(super) const MAX_BACKGROUND_TASKS: usize = 50;

/// The longest description kept.
const MAX_DESCRIPTION_CHARS: usize = 300;

/// A task running in the background.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundTask {
    /// Its id: what a stop names.
    pub task_id: String,
    /// `local_bash`, `local_agent`, ...
    pub task_type: Option<String>,
    /// What it does, in the model's words.
    pub description: Option<String>,
    /// A subagent's type.
    pub subagent_type: Option<String>,
}

impl Projector {
    /// The whole set of background tasks, as the CLI lists it now.
    pub(super) fn background_tasks(
        &mut self,
        changed: &BackgroundTasksChanged,
        emit: &mut impl FnMut(Update),
    ) {
        let tasks: Vec<BackgroundTask> = changed
            .tasks
            .iter()
            .flatten()
            .take(MAX_BACKGROUND_TASKS)
            .map(|task| BackgroundTask {
                task_id: cut(&task.task_id, MAX_DESCRIPTION_CHARS),
                task_type: task.task_type.as_deref().map(|kind| cut(kind, 40)),
                description: task
                    .description
                    .as_deref()
                    .map(|text| cut(text, MAX_DESCRIPTION_CHARS)),
                subagent_type: task.subagent_type.as_deref().map(|kind| cut(kind, 80)),
            })
            .collect();
        if tasks != self.view.background_tasks {
            // Those gone from the list are kept until their end is told.
            for gone in self.view.background_tasks.drain(..) {
                if !tasks.iter().any(|task| task.task_id == gone.task_id) {
                    if self.unlisted_tasks.len() >= MAX_BACKGROUND_TASKS {
                        self.unlisted_tasks.pop_front();
                    }
                    self.unlisted_tasks.push_back(gone);
                }
            }
            self.view.background_tasks = tasks.clone();
            emit(Update::BackgroundTasks { tasks });
        }
    }

    /// A background task ended: said in the transcript, and taken off the list (a CLI that
    /// sends no `background_tasks_changed` after it leaves none behind).
    pub(super) fn task_ended(&mut self, event: &TaskEvent, emit: &mut impl FnMut(Update)) {
        let Some(task_id) = event.task_id.as_deref() else { return };
        let listed = self.view.background_tasks.iter().position(|task| task.task_id == task_id);
        let task = if let Some(index) = listed {
            let task = self.view.background_tasks.remove(index);
            emit(Update::BackgroundTasks { tasks: self.view.background_tasks.clone() });
            task
        } else if let Some(task) = self
            .unlisted_tasks
            .iter()
            .position(|task| task.task_id == task_id)
            .and_then(|index| self.unlisted_tasks.remove(index))
        {
            // Already off the list (2.1.250 says so first).
            task
        } else {
            // Not one the session knew in the background (a subagent the turn waited for).
            return;
        };
        let what = task
            .description
            .or_else(|| event.description.as_deref().map(|text| cut(text, MAX_DESCRIPTION_CHARS)))
            .unwrap_or_else(|| "A background task".to_owned());
        let (level, how) = match event.status.as_deref() {
            Some("completed") => (Level::Info, "finished"),
            Some("failed") => (Level::Warn, "failed"),
            Some("stopped" | "killed") => (Level::Info, "was stopped"),
            _ => (Level::Info, "ended"),
        };
        emit(notice(level, NoticeKind::BackgroundTask, format!("Background: “{what}” {how}.")));
    }
}
