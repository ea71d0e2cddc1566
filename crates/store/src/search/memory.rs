//! The search index of the memory store (tests): every entry in a list, scanned, with the
//! meaning the databases give each filter.

use std::collections::{BTreeMap, HashMap};

use super::{file_name, GroupBy, SearchEntry, SearchGroup, SearchHit, SearchQuery, SNIPPET_CHARS};

/// The entries and marks.
#[derive(Debug, Default)]
pub(crate) struct Index {
    entries: BTreeMap<u64, SearchEntry>,
    keys: HashMap<(String, u64, u32), u64>,
    marks: HashMap<String, u64>,
    next: u64,
}

/// A text's words, as every store cuts them ([`super::words_of`]).
fn tokens(text: &str) -> Vec<String> {
    super::words_of(text).split(' ').filter(|word| !word.is_empty()).map(str::to_owned).collect()
}

/// Whether `text` holds the words of `phrase` one after another.
fn holds(text: &[String], phrase: &str) -> bool {
    let phrase = tokens(phrase);
    phrase.is_empty() || text.windows(phrase.len()).any(|window| window == phrase.as_slice())
}

impl Index {
    pub(crate) fn write(&mut self, entries: &[SearchEntry], marks: &[(String, u64)]) {
        for entry in entries {
            let key = (entry.session_id.clone(), entry.seq, entry.place);
            if self.keys.contains_key(&key) {
                continue;
            }
            self.next += 1;
            self.keys.insert(key, self.next);
            self.entries.insert(self.next, entry.clone());
        }
        for (session, seq) in marks {
            let mark = self.marks.entry(session.clone()).or_default();
            *mark = (*mark).max(*seq);
        }
    }

    pub(crate) fn forget(&mut self, session_id: &str) {
        self.entries.retain(|_, entry| entry.session_id != session_id);
        self.keys.retain(|(session, _, _), _| session != session_id);
        self.marks.remove(session_id);
    }

    pub(crate) fn marks(&self) -> HashMap<String, u64> {
        self.marks.clone()
    }

    fn matches(id: u64, entry: &SearchEntry, query: &SearchQuery) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|want| have.as_ref() == Some(want))
        };
        let words = tokens(&entry.text);
        query.kind.is_none_or(|kind| kind == entry.kind)
            && same(&query.tool, &entry.tool)
            && same(&query.decision, &entry.decision)
            && same(&query.decided_by, &entry.decided_by)
            && same(&query.origin, &entry.origin)
            && same(&query.token, &entry.token)
            && same(&query.model, &entry.model)
            && same(&query.node, &entry.node)
            && query.session_id.as_ref().is_none_or(|id| *id == entry.session_id)
            && query.run.as_ref().is_none_or(|run| match &entry.run {
                Some(have) if run.contains(':') => have == run,
                Some(have) => have.starts_with(&format!("{run}:")),
                None => false,
            })
            && query.who.as_ref().is_none_or(|who| {
                entry.who.as_ref().is_some_and(|have| have.contains(who.as_str()))
            })
            && query.project.as_ref().is_none_or(|project| {
                let project = project.trim_end_matches('/');
                entry.project == project || entry.project.starts_with(&format!("{project}/"))
            })
            && query.worktree.is_none_or(|worktree| worktree == entry.worktree)
            && query.since_ms.is_none_or(|since| entry.ts_ms >= since)
            && query.until_ms.is_none_or(|until| entry.ts_ms < until)
            && query.min_cost_usd.is_none_or(|cost| entry.cost_usd >= cost)
            && query.command.as_ref().is_none_or(|word| {
                holds(&words, word)
                    && entry.command.as_ref().is_some_and(|command| command.contains(word.as_str()))
            })
            && query.words.iter().all(|word| holds(&words, word))
            && query.path.as_ref().is_none_or(|path| {
                let name = file_name(path);
                let tail = path.trim_start_matches('/');
                entry.paths.iter().any(|touched| {
                    file_name(&touched.path) == name
                        && (!query.wrote || touched.wrote)
                        && (!path.contains('/')
                            || touched.path == format!("/{tail}")
                            || touched.path.ends_with(&format!("/{tail}")))
                })
            })
            && query.before.is_none_or(|before| {
                entry.ts_ms < before.ts_ms || entry.ts_ms == before.ts_ms && id < before.id
            })
    }

    pub(crate) fn search(&self, query: &SearchQuery) -> Vec<SearchHit> {
        let mut found: Vec<(u64, &SearchEntry)> = self
            .entries
            .iter()
            .filter(|(id, entry)| Self::matches(**id, entry, query))
            .map(|(id, entry)| (*id, entry))
            .collect();
        found.sort_by_key(|(id, entry)| std::cmp::Reverse((entry.ts_ms, *id)));
        found
            .into_iter()
            .take(query.limit.min(super::MAX_HITS))
            .map(|(id, entry)| {
                let mut entry = entry.clone();
                entry.text = entry.text.chars().take(SNIPPET_CHARS).collect();
                if !query.with_written {
                    entry.written = None;
                }
                SearchHit { id, entry }
            })
            .collect()
    }

    pub(crate) fn group(&self, query: &SearchQuery, by: GroupBy) -> Vec<SearchGroup> {
        let mut groups: HashMap<Option<String>, (u64, f64)> = HashMap::new();
        for (id, entry) in &self.entries {
            if Self::matches(*id, entry, query) {
                let group = groups.entry(by.key_of(entry)).or_default();
                group.0 += 1;
                group.1 += entry.cost_usd;
            }
        }
        let mut groups: Vec<SearchGroup> = groups
            .into_iter()
            .map(|(key, (entries, cost_usd))| SearchGroup { key, entries, cost_usd })
            .collect();
        groups.sort_by(|a, b| {
            b.cost_usd
                .total_cmp(&a.cost_usd)
                .then(b.entries.cmp(&a.entries))
                .then(a.key.cmp(&b.key))
        });
        groups.truncate(super::MAX_GROUPS);
        groups
    }
}
