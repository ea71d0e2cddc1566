//! Read and Edit path rules held against what a shell command's words touch: a `Read(.env)`
//! deny holds for `cat .env`, `grep -r KEY .` and `cp .env /tmp`, an `Edit(src/**)` deny for
//! `sed -i s/a/b/ src/main.rs`, `rm -r src` and `echo x > src/a`, as far as the words show.
//!
//! Each simple command is read as words and redirections (quotes honoured). A table of the
//! commands that read or write the files they name says which words are read and which are
//! written, and which are roots a command reads everything under (`grep -r`, `cp -r`). A word
//! of any other command that names a path is taken as both read and written. Where the words
//! cannot decide (a `$VAR`, a glob, a `~user`, a search whose skipping rules the words do not
//! show, a `cd` to somewhere not written out), a rule that might hold asks a person; it never
//! lets the call through.
//!
//! What the words cannot show is out of reach, and docs/policy.md says so: what a program
//! does with a file inside itself (`python x.py`, a Makefile), paths a command makes up
//! (`git show HEAD:.env`), names built at run time, and symlinks (paths are compared as
//! written, `..` resolved). The words only make a call stricter: nothing here allows one.
//!
//! The shell words are split here, not by a crate: the splitters at hand (`shlex`) lose
//! whether a character was quoted (which decides whether `$X` and `*` expand) and know no
//! redirections.

use std::path::{Path, PathBuf};

use super::{
    absolute_pattern, normalize, resolve_pattern, BashCommand, Behavior, Content, MatchContext,
    Rule,
};
use super::{FILE_EDIT_TOOLS, FILE_READ_TOOLS};

/// A path rule to hold against the words, and what it does when it holds.
pub(super) struct PathRule<'a> {
    /// The rule.
    pub(super) rule: &'a Rule,
    /// Its name in decisions (with its block's condition).
    pub(super) name: String,
    /// Deny, or ask (an ask rule, or a deny rule whose block's condition is unknown).
    pub(super) effect: Behavior,
    /// Whether the rule surely applies (its block's condition is not unknown).
    pub(super) sure: bool,
}

/// What the words decide: the strictest hit, with the rule's name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WordsVerdict {
    /// Deny or ask.
    pub(super) behavior: Behavior,
    /// The rule.
    pub(super) rule: String,
    /// Why, in words: `the command reads .env`.
    pub(super) reason: String,
    /// The words surely touch what the rule names (else they cannot tell, and a policy that
    /// denies the call anyway still does).
    pub(super) certain: bool,
}

/// The largest command whose words are read; a longer one asks, if rules could hold.
const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// How deep `sh -c '…'` is read into.
const MAX_DEPTH: usize = 3;

/// Whether a rule is a path rule of a reading or an editing tool.
pub(super) fn is_path_rule(rule: &Rule) -> bool {
    matches!(rule.content, Some(Content::Path(_)))
        && FILE_READ_TOOLS.iter().chain(FILE_EDIT_TOOLS).any(|tool| rule.tool_matches(tool))
}

/// Holds `rules` against what `bash` touches, in `context`'s working directory.
pub(super) fn judge(
    bash: &BashCommand,
    rules: &[PathRule<'_>],
    context: &MatchContext,
) -> Option<WordsVerdict> {
    if rules.is_empty() {
        return None;
    }
    let mut verdicts = Vec::new();
    if bash.whole.len() > MAX_COMMAND_BYTES {
        let first = &rules[0];
        return Some(WordsVerdict {
            behavior: Behavior::Ask,
            rule: first.name.clone(),
            reason: "the command is too long to read its words".to_owned(),
            certain: false,
        });
    }
    judge_parts(bash, rules, context, Some(context.cwd.clone()), 0, &mut verdicts);
    // Deny beats ask; the first of each, in the command's order.
    verdicts
        .iter()
        .find(|verdict| verdict.behavior == Behavior::Deny)
        .or_else(|| verdicts.first())
        .cloned()
}

fn judge_parts(
    bash: &BashCommand,
    rules: &[PathRule<'_>],
    context: &MatchContext,
    start: Option<PathBuf>,
    depth: usize,
    verdicts: &mut Vec<WordsVerdict>,
) {
    // Where relative words resolve: where the command starts, until a `cd` moves it.
    let mut cwd = start.clone();
    let mut moved = false;
    for part in &bash.parts {
        judge_part(part, rules, context, &mut cwd, &mut moved, depth, verdicts);
    }
    // What runs inside `$(…)` runs where it stands, which the parts do not tell apart once a
    // `cd` moved them: then its relative words are undecided.
    let mut cwd = if moved { None } else { start };
    for part in &bash.hidden {
        judge_part(part, rules, context, &mut cwd, &mut moved, depth, verdicts);
    }
}

fn judge_part(
    part: &str,
    rules: &[PathRule<'_>],
    context: &MatchContext,
    cwd: &mut Option<PathBuf>,
    moved: &mut bool,
    depth: usize,
    verdicts: &mut Vec<WordsVerdict>,
) {
    let Some(command) = Command::parse(part) else {
        ask_any(rules, "a command's quotes do not close", verdicts);
        return;
    };
    if let Some(target) = command.changes_directory() {
        *moved = true;
        *cwd = match (target, cwd.as_ref()) {
            (Some(word), Some(from)) if !word.expands => Some(normalize(&from.join(&word.text))),
            _ => None,
        };
        return;
    }
    if let Some(inner) = command.shell_script() {
        if depth < MAX_DEPTH {
            // A shell started here starts where the command stands.
            let inner = BashCommand::parse(&inner);
            judge_parts(&inner, rules, context, cwd.clone(), depth + 1, verdicts);
        } else {
            ask_any(rules, "shells nest too deep to read", verdicts);
        }
    }
    for touch in command.touches() {
        hold(rules, &touch, cwd.as_deref(), context, verdicts);
    }
}

/// How a command touches a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Reads it (or lists it).
    Read,
    /// Writes, edits or removes it.
    Write,
    /// An unknown command names it: either.
    Either,
}

/// A path a command touches, as a word.
#[derive(Debug, Clone)]
struct Touch {
    word: Word,
    access: Access,
    /// Everything under it too (`grep -r`, `cp -r`, `rm -r`).
    recursive: bool,
    /// A recursive search that skips what the words do not show (hidden files, ignored
    /// ones): it may or may not read a file under it, so a rule that could hold asks.
    may_skip: bool,
}

/// Holds every rule against one touched path.
fn hold(
    rules: &[PathRule<'_>],
    touch: &Touch,
    cwd: Option<&Path>,
    context: &MatchContext,
    verdicts: &mut Vec<WordsVerdict>,
) {
    let text = &touch.word.text;
    let relative = !text.starts_with('/') && !text.starts_with('~');
    let undecidable = touch.word.expands || (relative && cwd.is_none());
    let path = match (text.strip_prefix("~/"), text.as_str()) {
        (Some(rest), _) => context.home.as_ref().map(|home| home.join(rest)),
        (None, "~") => context.home.clone(),
        _ if text.starts_with('/') => Some(PathBuf::from(text)),
        _ => cwd.map(|cwd| cwd.join(text)),
    }
    .map(|path| normalize(&path));
    for path_rule in rules {
        let rule = path_rule.rule;
        let reads = FILE_READ_TOOLS.iter().any(|tool| rule.tool_matches(tool));
        let edits = FILE_EDIT_TOOLS.iter().any(|tool| rule.tool_matches(tool));
        let applies = match touch.access {
            Access::Read => reads,
            Access::Write => edits,
            Access::Either => reads || edits,
        };
        if !applies {
            continue;
        }
        let Some(Content::Path(pattern)) = &rule.content else { continue };
        let Some(glob) = resolve_pattern(pattern, context) else { continue };
        let verb = match touch.access {
            Access::Read => "reads",
            Access::Write => "writes",
            Access::Either => "names",
        };
        let shown = shown(text);
        if undecidable {
            // A word that expands could name anything; a rule of this kind might hold.
            let under = literal_dir(text).and_then(|dir| match cwd {
                _ if dir.starts_with('/') => Some(PathBuf::from(dir)),
                Some(cwd) if !dir.starts_with('~') && !dir.starts_with('$') => Some(cwd.join(dir)),
                _ => None,
            });
            let could = match under {
                Some(dir) => could_hold_under(pattern, &normalize(&dir), context),
                None => true,
            };
            if could {
                verdicts.push(WordsVerdict {
                    behavior: Behavior::Ask,
                    rule: path_rule.name.clone(),
                    reason: format!(
                        "policy rule {} may hold for {shown}, which the command {verb} and its words do not decide: asking a person",
                        path_rule.name
                    ),
                    certain: false,
                });
            }
            continue;
        }
        let Some(path) = &path else { continue };
        let exact = glob.is_match(path) || glob.is_match(path.join("any-file"));
        let inside = touch.recursive && could_hold_under(pattern, path, context);
        if !exact && !inside {
            continue;
        }
        let unsure = !exact && touch.may_skip;
        let behavior = if unsure { Behavior::Ask } else { path_rule.effect };
        let what = if exact {
            format!("the command {verb} {shown}")
        } else {
            format!("the command {verb} everything under {shown}")
        };
        let reason = match behavior {
            Behavior::Deny => format!("denied by policy rule {}: {what}", path_rule.name),
            _ if unsure => format!(
                "policy rule {} may hold: {what}, unless it skips what the rule names; asking a person",
                path_rule.name
            ),
            _ => format!("policy rule {} asks a person: {what}", path_rule.name),
        };
        let certain = !unsure && path_rule.sure;
        verdicts.push(WordsVerdict { behavior, rule: path_rule.name.clone(), reason, certain });
    }
}

/// Asks for the first rule, saying why the words cannot be read.
fn ask_any(rules: &[PathRule<'_>], why: &str, verdicts: &mut Vec<WordsVerdict>) {
    if let Some(first) = rules.first() {
        verdicts.push(WordsVerdict {
            behavior: Behavior::Ask,
            rule: first.name.clone(),
            reason: format!("{why}, so policy rule {} may hold: asking a person", first.name),
            certain: false,
        });
    }
}

/// A word as shown in a reason: quoted, and cut.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    format!("`{cut}`")
}

/// The directory a word's literal start names, before anything in it expands (`src/*.rs` →
/// `src`; `*.env` → `.`); `None` when it starts expanding at once (`$DIR/x`).
fn literal_dir(text: &str) -> Option<&str> {
    let end = text.find(['$', '*', '?', '[', '{', '`']).unwrap_or(text.len());
    if end == 0 && text.starts_with('$') {
        return None;
    }
    let literal = &text[..end];
    Some(match literal.rfind('/') {
        Some(0) => "/",
        Some(slash) => &literal[..slash],
        None => ".",
    })
}

/// Whether a path pattern could name something under `root` (or `root` itself).
fn could_hold_under(pattern: &str, root: &Path, context: &MatchContext) -> bool {
    let Some(glob) = resolve_pattern(pattern, context) else { return false };
    if glob.is_match(root) || glob.is_match(root.join("any-file")) {
        return true;
    }
    let Some(absolute) = absolute_pattern(pattern, context) else { return false };
    // The pattern's literal directory: what it names lies under it.
    let end = absolute.find(['*', '?', '[', '{']).unwrap_or(absolute.len());
    let literal = &absolute[..end];
    let literal = Path::new(literal.rsplit_once('/').map_or(literal, |(dir, _)| dir));
    literal.starts_with(root) || (root.starts_with(literal) && absolute.contains("**"))
}

/// A shell word: its text with quotes taken off, and whether the shell would change it (an
/// unquoted glob or `~user`, or a `$`/backtick outside single quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    expands: bool,
}

/// One simple command: its words and its redirections' targets.
#[derive(Debug, Default)]
struct Command {
    words: Vec<Word>,
    /// Files redirected from (`< f`).
    inputs: Vec<Word>,
    /// Files redirected to (`> f`, `>> f`, `2> f`, `&> f`).
    outputs: Vec<Word>,
}

/// Commands that run the rest of their words as a command.
const WRAPPERS: &[&str] = &[
    "sudo", "env", "nice", "nohup", "time", "command", "exec", "builtin", "stdbuf", "timeout",
    "xargs",
];

/// Commands that read every file they name.
const READERS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "nl",
    "tac",
    "wc",
    "sort",
    "uniq",
    "cut",
    "strings",
    "od",
    "xxd",
    "hexdump",
    "base64",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "cksum",
    "file",
    "stat",
    "diff",
    "cmp",
    "comm",
    "paste",
    "join",
    "fold",
    "fmt",
    "column",
    "iconv",
    "source",
    ".",
    "ls",
    "tree",
    "bat",
    "view",
    "vi",
    "vim",
    "nano",
    "emacs",
    "open",
    "cat",
];

/// Commands that write, edit or remove every file they name.
const WRITERS: &[&str] = &[
    "rm", "unlink", "shred", "truncate", "touch", "chmod", "chown", "chgrp", "mkdir", "rmdir",
    "ln", "tee",
];

/// Commands that print or compute without touching the files their words name.
const NO_FILES: &[&str] = &[
    "echo", "printf", "true", "false", "pwd", "exit", "export", "unset", "test", "[", "date",
    "sleep", "whoami", "uname", "which", "type", "read", "set", "shift", "return", "wait", "kill",
    "seq", "yes", "basename", "dirname", "realpath", "readlink", "id", "hostname",
];

impl Command {
    /// Reads one simple command's words; `None` when a quote does not close.
    fn parse(text: &str) -> Option<Command> {
        let mut command = Command::default();
        let mut chars = text.chars().peekable();
        let mut word = String::new();
        let mut expands = false;
        let mut started = false;
        let mut quote: Option<char> = None;
        // The redirection the next word is the target of: `<` (input) or `>` (output), or a
        // here-document's word or an fd (`>&2`), which names no file.
        let mut target: Option<char> = None;
        let finish = |command: &mut Command,
                      word: &mut String,
                      expands: &mut bool,
                      started: &mut bool,
                      target: &mut Option<char>| {
            if !*started {
                return;
            }
            let done = Word { text: std::mem::take(word), expands: *expands };
            match target.take() {
                Some('<') => command.inputs.push(done),
                Some('>') => command.outputs.push(done),
                Some(_) => {}
                None => command.words.push(done),
            }
            *expands = false;
            *started = false;
        };
        while let Some(c) = chars.next() {
            match quote {
                Some('\'') => {
                    if c == '\'' {
                        quote = None;
                    } else {
                        word.push(c);
                    }
                    continue;
                }
                Some('"') => {
                    match c {
                        '"' => quote = None,
                        '\\' => {
                            if let Some(next) = chars.next() {
                                word.push(next);
                            }
                        }
                        '$' | '`' => {
                            expands = true;
                            word.push(c);
                        }
                        _ => word.push(c),
                    }
                    continue;
                }
                _ => {}
            }
            match c {
                '\'' | '"' => {
                    quote = Some(c);
                    started = true;
                }
                '\\' => {
                    if let Some(next) = chars.next() {
                        word.push(next);
                        started = true;
                    }
                }
                // A subshell's parentheses and a group's braces part words, as blanks do.
                ' ' | '\t' | '\n' | '(' | ')' => {
                    finish(&mut command, &mut word, &mut expands, &mut started, &mut target)
                }
                '<' | '>' => {
                    // An fd before it (`2>`), or `&>`'s `&`, is no word.
                    let descriptor =
                        started && !expands && word.chars().all(|d| d.is_ascii_digit());
                    if descriptor || (word == "&" && c == '>') {
                        word.clear();
                        started = false;
                    } else {
                        finish(&mut command, &mut word, &mut expands, &mut started, &mut target);
                    }
                    let mut kind = c;
                    if c == '<' && chars.peek() == Some(&'<') {
                        // A here-document or here-string: its word is no file.
                        chars.next();
                        if chars.peek() == Some(&'<') {
                            chars.next();
                        }
                        kind = 'h';
                    } else if c == '>' && matches!(chars.peek(), Some('>' | '|')) {
                        chars.next();
                    }
                    if chars.peek() == Some(&'&') {
                        // `>&2`, `<&0`: a descriptor; `>&file` is bash's `&>`.
                        chars.next();
                        if chars.peek().is_some_and(|d| d.is_ascii_digit() || *d == '-') {
                            kind = 'h';
                        }
                    }
                    target = Some(kind);
                }
                '$' | '`' => {
                    expands = true;
                    started = true;
                    word.push(c);
                }
                '*' | '?' | '[' | '{' => {
                    expands = true;
                    started = true;
                    word.push(c);
                }
                '~' if !started => {
                    // `~/x` is the home (resolved when held); `~user` is someone else's.
                    if !matches!(chars.peek(), None | Some('/' | ' ')) {
                        expands = true;
                    }
                    started = true;
                    word.push(c);
                }
                _ => {
                    started = true;
                    word.push(c);
                }
            }
        }
        if quote.is_some() {
            return None;
        }
        finish(&mut command, &mut word, &mut expands, &mut started, &mut target);
        Some(command)
    }

    /// Its words after wrappers (`sudo`, `env X=1`, `timeout 5`): the command that runs.
    fn run(&self) -> &[Word] {
        self.unwrapped().0
    }

    /// [`Command::run`], and whether `xargs` hands it words the command line does not show.
    fn unwrapped(&self) -> (&[Word], bool) {
        let mut words = self.words.as_slice();
        let mut xargs = false;
        while let Some((first, rest)) = words.split_first() {
            let wrapper = first.text.as_str();
            if !WRAPPERS.contains(&wrapper) {
                break;
            }
            xargs |= wrapper == "xargs";
            words = rest;
            // Its own options and assignments (`env -i X=1`, `timeout 5`, `sudo -u root`).
            let valued = options_with_values(wrapper);
            while let Some((next, rest)) = words.split_first() {
                let option = next.text.starts_with('-');
                let assignment = next.text.contains('=') && !next.text.starts_with('=');
                let number = next.text.chars().all(|c| c.is_ascii_digit() || c == '.');
                if !(option || assignment || number) || next.text.is_empty() {
                    break;
                }
                words = if valued.contains(&next.text.as_str()) && !rest.is_empty() {
                    &rest[1..]
                } else {
                    rest
                };
            }
        }
        (words, xargs)
    }

    /// `cd DIR` (`Some(None)`: to somewhere the words do not say).
    fn changes_directory(&self) -> Option<Option<Word>> {
        let run = self.run();
        let (name, rest) = run.split_first()?;
        if !matches!(name.text.as_str(), "cd" | "pushd" | "popd") {
            return None;
        }
        let target = rest.iter().find(|word| !word.text.starts_with('-'));
        Some(match (name.text.as_str(), target) {
            ("popd", _) | (_, None) => None,
            (_, Some(word)) if word.text.starts_with('~') => None,
            (_, Some(word)) => Some(word.clone()),
        })
    }

    /// `sh -c 'SCRIPT'` (and bash, zsh, dash): the script.
    fn shell_script(&self) -> Option<String> {
        let run = self.run();
        let (name, rest) = run.split_first()?;
        let shell = name.text.rsplit('/').next().unwrap_or("");
        if !matches!(shell, "sh" | "bash" | "zsh" | "dash" | "ksh") {
            return None;
        }
        let flag = rest.iter().position(|word| {
            word.text.starts_with('-') && !word.text.starts_with("--") && word.text.contains('c')
        })?;
        rest.get(flag + 1).map(|word| word.text.clone())
    }

    /// What it touches, by the table.
    fn touches(&self) -> Vec<Touch> {
        let touch = |word: &Word, access, recursive, may_skip| Touch {
            word: word.clone(),
            access,
            recursive,
            may_skip,
        };
        let mut out: Vec<Touch> =
            self.inputs.iter().map(|w| touch(w, Access::Read, false, false)).collect();
        out.extend(self.outputs.iter().map(|w| touch(w, Access::Write, false, false)));
        let (run, xargs) = self.unwrapped();
        let Some((name, args)) = run.split_first() else { return out };
        let name = name.text.rsplit('/').next().unwrap_or("").to_owned();
        if xargs && !NO_FILES.contains(&name.as_str()) {
            // `… | xargs cat`: the names come from its input, which the words do not show.
            let unseen = Word { text: "$XARGS".into(), expands: true };
            let access =
                if READERS.contains(&name.as_str()) { Access::Read } else { Access::Either };
            out.push(touch(&unseen, access, false, false));
        }
        let options: Vec<&Word> = args.iter().filter(|w| w.text.starts_with('-')).collect();
        let flag = |short: char, long: &str| {
            options.iter().any(|w| {
                w.text == long || (!w.text.starts_with("--") && w.text[1..].contains(short))
            })
        };
        // Non-option words, `--` ends options.
        let valued = options_with_values(&name);
        let mut operands: Vec<Word> = Vec::new();
        // `cp -t DIR` / `--target-directory=DIR`: every operand is a source.
        let mut target: Option<Word> = None;
        // A pattern or script given as an option (`-e X`, `-eX`, `--regexp=X`, `-f FILE`).
        let mut pattern_option = false;
        let mut after_dashes = false;
        let mut words = args.iter();
        while let Some(word) = words.next() {
            if after_dashes || !word.text.starts_with('-') || word.text == "-" {
                operands.push(word.clone());
            } else if word.text == "--" {
                after_dashes = true;
            } else if valued.contains(&word.text.as_str()) {
                // The option's value is the next word: a file it reads (`-f FILE`) or writes
                // (`sort -o FILE`), or no path at all (`-e PATTERN`, `-n 5`).
                let Some(value) = words.next() else { break };
                match word.text.as_str() {
                    "-f" | "--file" => {
                        pattern_option = true;
                        out.push(touch(value, Access::Read, false, false));
                    }
                    "-e" | "-E" | "--regexp" | "--expression" => pattern_option = true,
                    "-o" | "--output" => out.push(touch(value, Access::Write, false, false)),
                    "-t" | "--target-directory" if is_copier(&name) => target = Some(value.clone()),
                    _ => {}
                }
            } else if let Some((key, value)) = word.text.split_once('=') {
                let value = Word { text: value.to_owned(), expands: word.expands };
                match key {
                    "--regexp" | "--expression" => pattern_option = true,
                    "--file" if !name_is_unknown(&name) => {
                        pattern_option = true;
                        out.push(touch(&value, Access::Read, false, false));
                    }
                    "--target-directory" if is_copier(&name) => target = Some(value),
                    // `--file=PATH`: its value may be a path.
                    _ if name_is_unknown(&name) => operands.push(value),
                    _ => {}
                }
            } else if !word.text.starts_with("--") && word.text.len() > 2 {
                // A short option with its value attached: `-eKEY`, `-fPATTERNS`, `-tDIR`. A
                // word whose second character is not one byte (`-é…`) names no such option.
                let Some((option, value)) = word.text.split_at_checked(2) else { continue };
                let value = Word { text: value.to_owned(), expands: word.expands };
                if valued.contains(&option) {
                    match option {
                        "-e" | "-E" => pattern_option = true,
                        "-f" => {
                            pattern_option = true;
                            out.push(touch(&value, Access::Read, false, false));
                        }
                        "-o" => out.push(touch(&value, Access::Write, false, false)),
                        "-t" if is_copier(&name) => target = Some(value),
                        _ => {}
                    }
                }
            }
        }
        match name.as_str() {
            n if NO_FILES.contains(&n) => {}
            n if READERS.contains(&n) => {
                // `diff -r` reads every file under the directories it compares.
                let recursive = n == "diff" && flag('r', "--recursive");
                out.extend(operands.iter().map(|w| touch(w, Access::Read, recursive, false)));
            }
            n if WRITERS.contains(&n) => {
                let recursive = matches!(n, "rm" | "chmod" | "chown" | "chgrp")
                    && flag('r', "--recursive")
                    || n == "rm" && flag('R', "--recursive");
                out.extend(operands.iter().map(|w| touch(w, Access::Write, recursive, false)));
            }
            "grep" | "egrep" | "fgrep" | "zgrep" => {
                let pattern_given = pattern_option;
                let recursive = flag('r', "--recursive") || flag('R', "--dereference-recursive");
                let files: Vec<&Word> = operands.iter().skip(usize::from(!pattern_given)).collect();
                if recursive && files.is_empty() {
                    out.push(touch(
                        &Word { text: ".".into(), expands: false },
                        Access::Read,
                        true,
                        false,
                    ));
                }
                out.extend(files.iter().map(|w| touch(w, Access::Read, recursive, false)));
            }
            "rg" | "ag" | "ack" | "ugrep" | "git-grep" => {
                let pattern_given = pattern_option;
                let files: Vec<&Word> = operands.iter().skip(usize::from(!pattern_given)).collect();
                if files.is_empty() {
                    out.push(touch(
                        &Word { text: ".".into(), expands: false },
                        Access::Read,
                        true,
                        true,
                    ));
                }
                out.extend(files.iter().map(|w| touch(w, Access::Read, true, true)));
            }
            "find" | "fd" | "fdfind" | "du" => {
                // Names only, unless it runs something on what it finds.
                let runs = args.iter().any(|w| {
                    matches!(
                        w.text.as_str(),
                        "-exec"
                            | "-execdir"
                            | "-ok"
                            | "-okdir"
                            | "-delete"
                            | "-x"
                            | "--exec"
                            | "-X"
                            | "--exec-batch"
                    )
                });
                let mut roots: Vec<Word> = if name == "find" {
                    args.iter()
                        .take_while(|w| !w.text.starts_with('-') && w.text != "(" && w.text != "!")
                        .cloned()
                        .collect()
                } else {
                    operands.iter().skip(usize::from(name != "du")).cloned().collect()
                };
                if roots.is_empty() {
                    roots.push(Word { text: ".".into(), expands: false });
                }
                for root in &roots {
                    out.push(touch(
                        root,
                        if runs { Access::Either } else { Access::Read },
                        runs,
                        true,
                    ));
                }
            }
            "sed" | "perl" => {
                let in_place = flag('i', "--in-place")
                    || options
                        .iter()
                        .any(|w| w.text.starts_with("--in-place") || w.text.starts_with("-i"));
                let script_given = pattern_option;
                let files = operands.iter().skip(usize::from(!script_given));
                let access = if in_place { Access::Write } else { Access::Read };
                out.extend(files.map(|w| touch(w, access, false, false)));
            }
            "awk" | "gawk" | "mawk" | "jq" | "yq" => {
                let program_given = name.ends_with("awk") && pattern_option;
                let files = operands.iter().skip(usize::from(!program_given));
                out.extend(files.map(|w| touch(w, Access::Read, false, false)));
            }
            "cp" | "mv" | "install" | "rsync" | "scp" => {
                let recursive =
                    flag('r', "--recursive") || flag('R', "--recursive") || flag('a', "--archive");
                let source_access = if name == "mv" { Access::Either } else { Access::Read };
                let split = match &target {
                    Some(dir) => Some((dir, operands.as_slice())),
                    None => operands.split_last(),
                };
                if let Some((dest, sources)) = split {
                    for source in sources {
                        out.push(touch(source, source_access, recursive || name == "mv", false));
                        // Into a directory: the file it makes there.
                        if !source.expands {
                            let file =
                                source.text.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                            if !file.is_empty() {
                                let text = format!("{}/{file}", dest.text.trim_end_matches('/'));
                                out.push(touch(
                                    &Word { text, expands: dest.expands },
                                    Access::Write,
                                    recursive,
                                    false,
                                ));
                            }
                        }
                    }
                    out.push(touch(dest, Access::Write, recursive, false));
                }
            }
            "dd" => {
                for word in args {
                    if let Some(file) = word.text.strip_prefix("if=") {
                        out.push(touch(
                            &Word { text: file.into(), expands: word.expands },
                            Access::Read,
                            false,
                            false,
                        ));
                    } else if let Some(file) = word.text.strip_prefix("of=") {
                        out.push(touch(
                            &Word { text: file.into(), expands: word.expands },
                            Access::Write,
                            false,
                            false,
                        ));
                    }
                }
            }
            "tar" | "zip" | "unzip" | "gzip" | "gunzip" | "zcat" | "bzip2" | "xz" => {
                // Archives read and write their operands.
                out.extend(operands.iter().map(|w| touch(w, Access::Either, true, false)));
            }
            "sh" | "bash" | "zsh" | "dash" | "ksh" if self.shell_script().is_some() => {}
            // Any other command: a word that names a path may be read or written. A word that
            // expands is no evidence either way here (an unknown command's words are not known
            // to be paths).
            _ => {
                out.extend(
                    operands
                        .iter()
                        .skip(if name == "git" { 1 } else { 0 })
                        .filter(|w| !w.expands)
                        .map(|w| touch(w, Access::Either, false, false)),
                );
            }
        }
        out
    }
}

/// The options of `name` that take the next word as their value.
fn options_with_values(name: &str) -> &'static [&'static str] {
    match name {
        "grep" | "egrep" | "fgrep" | "zgrep" | "rg" | "ag" | "ack" | "ugrep" => &[
            "-e",
            "-f",
            "-m",
            "-A",
            "-B",
            "-C",
            "-g",
            "-t",
            "-T",
            "--regexp",
            "--file",
            "--max-count",
            "--glob",
            "--type",
            "--type-not",
        ],
        "sed" => &["-e", "-f", "--expression", "--file", "-l"],
        "perl" => &["-e", "-E", "-I", "-M"],
        "awk" | "gawk" | "mawk" => &["-f", "-v", "-F", "--file"],
        "head" | "tail" => &["-n", "-c", "--lines", "--bytes"],
        "cut" => &["-d", "-f", "-c", "-b", "--delimiter", "--fields"],
        "sort" => &["-o", "-t", "-k", "-S", "--output", "--key"],
        "jq" | "yq" => &["--arg", "--argjson", "--indent", "-L"],
        "xargs" => &["-I", "-n", "-P", "-d", "-a", "-L", "-s", "-E"],
        "timeout" => &["-s", "-k", "--signal", "--kill-after"],
        "nice" => &["-n", "--adjustment"],
        "sudo" => &["-u", "-g", "-C", "-D", "-h", "-p", "-U", "--user", "--group"],
        "cp" | "mv" | "install" => {
            &["-t", "-S", "--target-directory", "--suffix", "-m", "-o", "-g"]
        }
        "tar" => &["-C", "--directory"],
        "git" => &["-C", "-c", "--git-dir", "--work-tree"],
        _ => &[],
    }
}

/// Whether `name` copies or moves files (its `-t DIR` is where they go).
fn is_copier(name: &str) -> bool {
    matches!(name, "cp" | "mv" | "install")
}

/// Whether `name` is no command of the table.
fn name_is_unknown(name: &str) -> bool {
    !(NO_FILES.contains(&name) || READERS.contains(&name) || WRITERS.contains(&name))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::policy::{Behavior, CallFacts, MatchContext, Policy};

    fn context() -> MatchContext {
        MatchContext { cwd: "/work/project".into(), home: Some("/home/me".into()) }
    }

    const POLICY: &str = r#"
        [permissions]
        allow = ["Bash"]
        deny = ["Read(.env)", "Read(secrets/**)", "Edit(src/**)"]
        ask = ["Read(~/.ssh/**)"]
    "#;

    fn bash(policy: &Policy, command: &str) -> (Behavior, Option<String>, String) {
        let decision = policy.decide_call(
            "Bash",
            &json!({ "command": command }),
            &context(),
            &CallFacts::default(),
        );
        (decision.behavior, decision.rule, decision.reason)
    }

    #[test]
    fn read_and_edit_rules_hold_for_what_a_commands_words_touch() {
        let policy = Policy::from_toml(POLICY).unwrap();
        let cases: &[(&str, Behavior)] = &[
            // Reading what a Read rule denies, by name, in quotes, through `..`, redirected.
            ("cat .env", Behavior::Deny),
            ("cat \".env\"", Behavior::Deny),
            ("cat src/../.env", Behavior::Deny),
            ("wc -l<.env", Behavior::Deny),
            ("cat < .env", Behavior::Deny),
            ("head -n 5 .env", Behavior::Deny),
            ("grep KEY .env", Behavior::Deny),
            ("grep -e .env README.md", Behavior::Allow),
            ("grep -rn KEY .", Behavior::Deny),
            ("grep -r KEY", Behavior::Deny),
            ("grep -rn KEY docs", Behavior::Allow),
            ("cat secrets/key.pem", Behavior::Deny),
            ("rg KEY secrets", Behavior::Deny),
            ("dd if=.env of=/tmp/x", Behavior::Deny),
            ("cp .env /tmp/x", Behavior::Deny),
            ("sudo -u root cat .env", Behavior::Deny),
            ("env FOO=1 timeout 5 cat .env", Behavior::Deny),
            ("bash -c 'cat .env'", Behavior::Deny),
            ("echo $(cat .env)", Behavior::Deny),
            ("git add .env", Behavior::Deny),
            ("cd secrets && cat key", Behavior::Deny),
            // Writing what an Edit rule denies.
            ("sed -i s/a/b/ src/main.rs", Behavior::Deny),
            ("echo x > src/a.rs", Behavior::Deny),
            ("echo x | tee src/a.rs", Behavior::Deny),
            ("cp README.md src/", Behavior::Deny),
            ("rm -rf src", Behavior::Deny),
            ("rm -rf .", Behavior::Deny),
            ("sort -o src/list data.txt", Behavior::Deny),
            // What the rules do not name.
            ("cat README.md", Behavior::Allow),
            ("cat .env.example", Behavior::Allow),
            ("cat 'my .env'", Behavior::Allow),
            ("sed s/a/b/ src/main.rs", Behavior::Allow),
            ("echo .env", Behavior::Allow),
            ("echo hi 2>&1 >> notes.txt", Behavior::Allow),
            ("mv a.txt b.txt", Behavior::Allow),
            ("find . -name '*.rs'", Behavior::Allow),
            ("cat docs/*.md", Behavior::Allow),
            ("python3 tools/x.py", Behavior::Allow),
            ("git status", Behavior::Allow),
            // What the first reading missed (a review's findings).
            ("(cat .env)", Behavior::Deny),
            ("cp -t /tmp .env", Behavior::Deny),
            ("cp --target-directory=/tmp .env", Behavior::Deny),
            ("cp -t src README.md", Behavior::Deny),
            ("grep -eKEY .env", Behavior::Deny),
            // An option whose letter is not ASCII (the fuzzer's find: it split inside it).
            ("grep -é KEY .env", Behavior::Deny),
            ("cat -éx README.md", Behavior::Allow),
            ("grep --regexp=KEY .env", Behavior::Deny),
            ("diff -r . /tmp/x", Behavior::Deny),
            ("cd docs && sh -c 'cat ../.env'", Behavior::Deny),
            ("echo $(cat .env); cd /tmp", Behavior::Ask),
            ("echo $(cat README.md); cd /tmp", Behavior::Ask),
            // Undecidable from the words: a person decides.
            ("cat $FILE", Behavior::Ask),
            ("cat *.env", Behavior::Ask),
            ("rg KEY", Behavior::Ask),
            ("find . -name .env -exec cat {} \\;", Behavior::Ask),
            ("cd $DIR && cat key", Behavior::Ask),
            ("ls | xargs cat", Behavior::Ask),
            ("cat 'unclosed", Behavior::Ask),
            // An ask rule asks.
            ("cat ~/.ssh/id_ed25519", Behavior::Ask),
        ];
        for (command, expected) in cases {
            let (behavior, rule, reason) = bash(&policy, command);
            assert_eq!(behavior, *expected, "{command}: {rule:?} {reason}");
        }
        let (_, rule, reason) = bash(&policy, "cat .env");
        assert_eq!(rule.as_deref(), Some("Read(.env)"));
        assert_eq!(reason, "denied by policy rule Read(.env): the command reads `.env`");
        let (_, _, reason) = bash(&policy, "cat $FILE");
        assert!(reason.contains("its words do not decide"), "{reason}");
    }

    #[test]
    fn the_words_apply_only_where_path_rules_are_and_never_allow() {
        let plain = Policy::from_toml("[permissions]\nallow = [\"Bash\"]").unwrap();
        assert_eq!(bash(&plain, "cat $FILE").0, Behavior::Allow, "no path rule: nothing to hold");
        let strict = Policy::from_toml("[permissions]\nallow = [\"Read\"]").unwrap();
        assert_eq!(bash(&strict, "cat README.md").0, Behavior::Ask, "a Read allow runs no Bash");
    }

    #[test]
    fn a_conditional_path_rule_holds_by_its_condition() {
        let policy = Policy::from_toml(
            "[permissions]\nallow = [\"Bash\"]\n[[permissions.when]]\norigin = [\"agent\"]\ndeny = [\"Read(.env)\"]",
        )
        .unwrap();
        let call = |origin: Option<&str>| {
            let facts = CallFacts {
                origin: origin.map(|text| crate::TurnOrigin::parse(text).unwrap()),
                mcp_source: None,
            };
            policy.decide_call("Bash", &json!({"command": "cat .env"}), &context(), &facts).behavior
        };
        assert_eq!(call(Some("agent")), Behavior::Deny);
        assert_eq!(call(Some("person")), Behavior::Allow);
        assert_eq!(call(None), Behavior::Ask);
    }
}
