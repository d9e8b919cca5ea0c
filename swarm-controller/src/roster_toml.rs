//! The config's `[hives.<name>]` tables read straight from the TOML
//! parser's events, for a roster of thousands of hives.
//!
//! The `toml` crate builds a document tree (a map per table, a span per
//! value) and serde then moves it into the config: at 10,000 hives that is
//! about ten times the lexing and parsing underneath it, which is
//! `toml_parser`, the same crate's grammar. [`split`] runs that grammar
//! once over the whole file, takes each hive table whose header and body
//! it knows, and gives back the rest of the file's text for the `toml`
//! crate, now a few lines long. The file is read in pieces of about 64
//! KiB, each cut before a table's header, one after another; a file of 1
//! MiB or more by two threads, each taking the pieces of one half
//! ([`split_at`]).
//!
//! It knows the shapes a roster is written in, by hand or by a TOML
//! writer (which gives nested maps tables of their own):
//!
//! ```toml
//! [hives.alpha]          # a bare name
//! nkey = "U…"            # any string form, each key once
//! jetstream_domain = "edge"
//! labels = { site = "basement", "rack no" = 'r12' }   # strings only
//!
//! [hives.beta]
//! nkey = "U…"
//! [hives.beta.labels]    # before or after [hives.beta], or without it
//! site = "attic"
//! ```
//!
//! Anything else makes it answer `None`, and the caller parses the file
//! whole as before: a syntax error anywhere, a hive table with another
//! key, a dotted key, a value that is not a string, a key given twice, a
//! table given twice, labels given both ways, a quoted name, `[hives]`,
//! `[[hives]]`. The caller also parses it whole when the rest of the file
//! mentions `hives` at all. So the two ways of reading always agree: on a
//! file this one takes, the roster is the one the `toml` crate would have
//! built, and every error message is still the `toml` crate's.

use std::borrow::Cow;

use toml_parser::decoder::ScalarKind;
use toml_parser::parser::{Event, EventKind, RecursionGuard, ValidateWhitespace};
use toml_parser::{ParseError, Source};

use crate::roster::{Labels, RosterEntry};

/// The nesting the `toml` crate allows (its own limit).
const DEPTH_LIMIT: u32 = 80;

/// One hive's table as read here.
#[derive(Debug)]
pub(crate) struct HiveTable {
    pub(crate) name: String,
    /// Byte offset where the `toml` crate's span of the table starts: the
    /// `[` of `[hives.<name>]`, or, for a hive given only by its
    /// `[hives.<name>.labels]`, the name in that header.
    pub(crate) at: usize,
    pub(crate) entry: RosterEntry,
}

/// The file split in two: its hive tables, sorted by name, and the text of
/// everything else.
#[derive(Debug)]
pub(crate) struct Split {
    pub(crate) hives: Vec<HiveTable>,
    pub(crate) rest: String,
}

/// What one table of the file is.
enum Section {
    /// `[hives.<name>]`, its entry, and whether it gave `labels`.
    Hive(String, RosterEntry, bool),
    /// `[hives.<name>.labels]`, where the name is, and the labels.
    Labels(String, usize, Labels),
    /// Any other table: left for the `toml` crate.
    Other,
}

/// From this size on the file is read by two threads, each taking the
/// pieces of one half: `--check-config` of the roster as a fleet deploys
/// it (1.4 MB at 10,000 hives) took a median 25.5 ms instead of 33.0 (30
/// runs each). Below it the thread cost more than it saved: cut, the
/// bench's bare roster (190 KB) was read 0.3 ms sooner, but `status` then
/// wrote its document in 15.4 ms instead of 13.0 (16 alternated runs of
/// the bench's library path; docs/benchmarks-controller.md, "Stop 41"),
/// likely from how the second thread's blocks left the allocators' arenas.
const TWO_THREADS_FROM: usize = 1024 * 1024;

/// The file is read in pieces of about this many bytes, one after another
/// into the same buffers: the grammar wants a piece's every token in a
/// list before it starts (about 7 bytes of list for each byte of text),
/// and a list for the whole of the deployed roster's 1.4 MB was 10 MB of
/// fresh memory, touched once and given back.
const PIECE_LEN: usize = 64 * 1024;

/// The hive tables of `text` and the rest of it, or `None` when the file
/// has anything this reader does not take (the module's comment).
pub(crate) fn split(text: &str) -> Option<Split> {
    let threads = if text.len() >= TWO_THREADS_FROM { 2 } else { 1 };
    split_at(text, &cuts(text, PIECE_LEN), threads)
}

/// Where the file is cut into pieces: at each first line that starts with
/// `[` at least `every` bytes past the last cut.
///
/// Outside a multi-line string or array such a line can only be a table's
/// header, and the grammar reads each table apart from those before it,
/// so each piece is read as it is in the whole. A cut inside a multi-line
/// string or array leaves it unclosed in the piece before it, which then
/// does not parse, and the file is read whole.
fn cuts(text: &str, every: usize) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut from = every;
    while let Some(after) = text
        .as_bytes()
        .get(from..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\n["))
    {
        let at = from + after + 1;
        cuts.push(at);
        from = at + every;
    }
    cuts
}

/// [`split`], with the file cut at `cuts` (byte offsets just past a line
/// end, in order), and the pieces read by `threads` threads (1 or 2), each
/// taking the pieces of about a share of the bytes in turn.
pub(crate) fn split_at(text: &str, cuts: &[usize], threads: usize) -> Option<Split> {
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain(std::iter::once(text.len()))
        .collect();
    let pieces: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
    // The second thread's pieces: those from the first cut at or past the
    // middle.
    let middle = match threads {
        1 => pieces.len(),
        _ => pieces
            .iter()
            .position(|&(start, _)| start >= text.len() / 2)
            .unwrap_or(pieces.len()),
    };
    let (firsts, seconds) = pieces.split_at(middle);
    let (first, second) = if seconds.is_empty() {
        (read_pieces(text, firsts)?, Piece::default())
    } else {
        std::thread::scope(|threads| {
            let read_second = || read_pieces(text, seconds);
            let second = std::thread::Builder::new()
                .name("config".into())
                .spawn_scoped(threads, read_second);
            let first = read_pieces(text, firsts);
            let second = match second {
                Ok(reading) => reading
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had (the process is at its task limit):
                // the second half is read here, after the first.
                Err(_) => read_second(),
            };
            Some((first?, second?))
        })?
    };
    let Piece {
        mut tables,
        mut labels,
        mut rest,
    } = first;
    tables.extend(second.tables);
    labels.extend(second.labels);
    rest.push_str(&second.rest);
    Some(Split {
        hives: merge(tables, labels)?,
        rest,
    })
}

/// The pieces `ranges` of `text`, one after another, as one.
fn read_pieces(text: &str, ranges: &[(usize, usize)]) -> Option<Piece> {
    let mut buffers = Buffers::default();
    let mut all = Piece::default();
    for &(start, end) in ranges {
        let piece = read_piece(&text[start..end], start, &mut buffers)?;
        all.tables.extend(piece.tables);
        all.labels.extend(piece.labels);
        all.rest.push_str(&piece.rest);
    }
    Some(all)
}

/// The lists the grammar fills for a piece, kept from one to the next.
#[derive(Default)]
struct Buffers {
    tokens: Vec<toml_parser::lexer::Token>,
    events: Vec<Event>,
}

/// What one piece of the file holds: its hive tables, its labels tables
/// (each with where it starts in the whole file) and the text of the rest.
#[derive(Default)]
struct Piece {
    tables: Vec<(String, usize, RosterEntry, bool)>,
    labels: Vec<(String, usize, Labels)>,
    rest: String,
}

/// One piece of the file, which starts `offset` bytes into it; `None`
/// when the piece does not parse or has anything this reader does not
/// take.
fn read_piece(text: &str, offset: usize, buffers: &mut Buffers) -> Option<Piece> {
    let source = Source::new(text);
    let Buffers { tokens, events } = buffers;
    tokens.clear();
    tokens.extend(source.lex());
    events.clear();
    let mut errors: Vec<ParseError> = Vec::new();
    {
        // Whitespace, comments and line ends are checked, as the `toml`
        // crate runs the grammar (and nesting is bounded), but not kept:
        // the grammar has placed every other event, and at 10,000 hives
        // they were half the events and their memory.
        let mut keep = |e: Event| {
            if !matches!(
                e.kind(),
                EventKind::Whitespace | EventKind::Comment | EventKind::Newline
            ) {
                events.push(e);
            }
        };
        let mut checked = ValidateWhitespace::new(&mut keep, source);
        let mut bounded = RecursionGuard::new(&mut checked, DEPTH_LIMIT);
        toml_parser::parser::parse_document(tokens, &mut bounded, &mut errors);
    }
    if !errors.is_empty() || events.iter().any(|e| e.kind() == EventKind::Error) {
        return None;
    }
    let headers: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            matches!(
                e.kind(),
                EventKind::StdTableOpen | EventKind::ArrayTableOpen
            )
        })
        .map(|(i, _)| i)
        .collect();
    let start_of = |i: usize| {
        headers
            .get(i)
            .map_or(text.len(), |&e| events[e].span().start())
    };

    let mut piece = Piece {
        tables: Vec::with_capacity(headers.len()),
        labels: Vec::new(),
        rest: String::from(&text[..start_of(0)]),
    };
    for (n, &first) in headers.iter().enumerate() {
        let end = headers.get(n + 1).copied().unwrap_or(events.len());
        let mut section = Cursor {
            events: &events[first..end],
            source,
        };
        let header_at = offset + events[first].span().start();
        match section.section()? {
            Section::Hive(name, entry, gave) => piece.tables.push((name, header_at, entry, gave)),
            Section::Labels(name, name_at, given) => {
                piece.labels.push((name, offset + name_at, given))
            }
            Section::Other => piece.rest.push_str(&text[start_of(n)..start_of(n + 1)]),
        }
    }
    Some(piece)
}

/// Each hive's table with its labels' table, by name; `None` when a table
/// is given twice or labels both ways.
fn merge(
    mut tables: Vec<(String, usize, RosterEntry, bool)>,
    mut labels: Vec<(String, usize, Labels)>,
) -> Option<Vec<HiveTable>> {
    tables.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    labels.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if tables.windows(2).any(|w| w[0].0 == w[1].0) || labels.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let mut hives = Vec::with_capacity(tables.len().max(labels.len()));
    let mut labels = labels.into_iter().peekable();
    for (name, at, mut entry, gave_labels) in tables {
        while let Some((alone, at, given)) = labels.next_if(|l| l.0 < name) {
            hives.push(labelled(alone, at, given));
        }
        if let Some((_, _, given)) = labels.next_if(|l| l.0 == name) {
            if gave_labels {
                return None;
            }
            entry.labels = given;
        }
        hives.push(HiveTable { name, at, entry });
    }
    hives.extend(labels.map(|(name, at, given)| labelled(name, at, given)));
    Some(hives)
}

/// A hive given only by its labels' table.
fn labelled(name: String, at: usize, labels: Labels) -> HiveTable {
    HiveTable {
        name,
        at,
        entry: RosterEntry {
            labels,
            ..RosterEntry::default()
        },
    }
}

/// The events of one table, header first, read from the front (its
/// whitespace, comments and line ends left out).
struct Cursor<'e, 'i> {
    events: &'e [Event],
    source: Source<'i>,
}

impl<'i> Cursor<'_, 'i> {
    fn next(&mut self) -> Option<Event> {
        let (first, rest) = self.events.split_first()?;
        self.events = rest;
        Some(*first)
    }

    fn expect(&mut self, kind: EventKind) -> Option<()> {
        (self.next()?.kind() == kind).then_some(())
    }

    /// A key's text, decoded (borrowed from the file unless it has
    /// escapes); `None` if it does not decode.
    fn key(&self, event: Event) -> Option<Cow<'i, str>> {
        let mut out = Cow::Borrowed("");
        let mut errors: Vec<ParseError> = Vec::new();
        self.source.get(event)?.decode_key(&mut out, &mut errors);
        errors.is_empty().then_some(out)
    }

    /// A string value, decoded; `None` for any other value or one that
    /// does not decode.
    fn string(&mut self) -> Option<String> {
        let event = self.next()?;
        if event.kind() != EventKind::Scalar {
            return None;
        }
        let mut out = String::new();
        let mut errors: Vec<ParseError> = Vec::new();
        let kind = self.source.get(event)?.decode_scalar(&mut out, &mut errors);
        (errors.is_empty() && kind == ScalarKind::String).then_some(out)
    }

    /// What this table is, from its header; `None` if a key of the
    /// header does not decode.
    fn section(&mut self) -> Option<Section> {
        if self.next()?.kind() != EventKind::StdTableOpen {
            return Some(Section::Other);
        }
        // The header's keys: (decoded, bare, where); past three it is not
        // a hive's.
        let mut path = Vec::with_capacity(3);
        loop {
            let key = self.next()?;
            if key.kind() != EventKind::SimpleKey {
                return None;
            }
            if path.len() == 3 {
                return Some(Section::Other);
            }
            path.push((self.key(key)?, key.encoding().is_none(), key.span().start()));
            match self.next()?.kind() {
                EventKind::KeySep => {}
                EventKind::StdTableClose => break,
                _ => return None,
            }
        }
        let bare = |i: usize, word: Option<&str>| {
            path.get(i)
                .is_some_and(|(k, bare, _)| *bare && word.is_none_or(|w| k == w))
        };
        if !bare(0, Some("hives")) || !bare(1, None) {
            return Some(Section::Other);
        }
        let name = path[1].0.to_string();
        match path.len() {
            2 => {
                let (entry, gave_labels) = self.hive_body()?;
                Some(Section::Hive(name, entry, gave_labels))
            }
            3 if bare(2, Some("labels")) => {
                Some(Section::Labels(name, path[1].2, self.labels_body()?))
            }
            _ => Some(Section::Other),
        }
    }

    /// The table's keys, each once and each of the shape it must have,
    /// and whether `labels` was one.
    fn hive_body(&mut self) -> Option<(RosterEntry, bool)> {
        let mut entry = RosterEntry::default();
        let mut labels_seen = false;
        while let Some(key) = self.next() {
            if key.kind() != EventKind::SimpleKey || key.encoding().is_some() {
                return None;
            }
            self.expect(EventKind::KeyValSep)?;
            match &*self.key(key)? {
                "nkey" if entry.nkey.is_none() => entry.nkey = Some(self.string()?),
                "jetstream_domain" if entry.jetstream_domain.is_none() => {
                    entry.jetstream_domain = Some(self.string()?)
                }
                "labels" if !labels_seen => {
                    labels_seen = true;
                    entry.labels = self.labels()?;
                }
                _ => return None,
            }
        }
        Some((entry, labels_seen))
    }

    /// `key = "value"` lines: string values, each key once.
    fn labels_body(&mut self) -> Option<Labels> {
        let mut labels = Labels::default();
        while let Some(key) = self.next() {
            if key.kind() != EventKind::SimpleKey {
                return None;
            }
            self.label(key, &mut labels)?;
        }
        labels.shrink_to_fit();
        Some(labels)
    }

    /// One label after its `key` event: `= "value"`, into `labels` unless
    /// the key is there already.
    fn label(&mut self, key: Event, labels: &mut Labels) -> Option<()> {
        let name = self.key(key)?.into_owned();
        self.expect(EventKind::KeyValSep)?;
        let value = self.string()?;
        labels.insert(name, value).is_none().then_some(())
    }

    /// `{ key = "value", … }`: string values, each key once.
    fn labels(&mut self) -> Option<Labels> {
        self.expect(EventKind::InlineTableOpen)?;
        let mut labels = Labels::default();
        let mut key = self.next()?;
        while key.kind() != EventKind::InlineTableClose {
            if key.kind() != EventKind::SimpleKey {
                return None;
            }
            self.label(key, &mut labels)?;
            match self.next()?.kind() {
                EventKind::ValueSep => key = self.next()?,
                EventKind::InlineTableClose => break,
                _ => return None,
            }
        }
        labels.shrink_to_fit();
        Some(labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &Split) -> Vec<&str> {
        s.hives.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn takes_a_roster_and_leaves_the_rest() {
        let text = "stale_after_secs = 60\n[nats]\nurl = \"nats://h:4222\"\n\
                    [hives.b] # second\nnkey = 'UB'\n\n[hives.a]\nlabels = { site = \"x\", \"rack no\" = 'r1', }\n\
                    [events]\n";
        let s = split(text).expect("taken");
        assert_eq!(names(&s), ["a", "b"]);
        assert_eq!(s.hives[1].entry.nkey.as_deref(), Some("UB"));
        assert_eq!(s.hives[0].entry.labels["rack no"], "r1");
        assert_eq!(&text[s.hives[0].at..s.hives[0].at + 9], "[hives.a]");
        assert_eq!(
            s.rest,
            "stale_after_secs = 60\n[nats]\nurl = \"nats://h:4222\"\n[events]\n"
        );
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        for text in [
            "[hives.a]\nnkey = 1\n",
            "[hives.a]\nother = \"x\"\n",
            "[hives.a]\nnkey = \"U\"\nnkey = \"U\"\n",
            "[hives.a]\nlabels.site = \"x\"\n",
            "[hives.a]\nlabels = { site = \"x\", site = \"y\" }\n",
            "[hives.a]\nlabels = { site = 1 }\n",
            "[hives.a]\nlabels = { a.b = \"x\" }\n",
            "[hives.a]\n[hives.a]\n",
            "[hives.a]\nnkey = \"\\q\"\n",
            "[hives.a\n",
            "[hives.a]\nlabels = {}\n[hives.a.labels]\n",
            "[hives.a.labels]\n[hives.a.labels]\n",
            "[hives.a.labels]\nsite = 1\n",
            "[hives.a.labels]\nsite.x = \"y\"\n",
        ] {
            assert!(split(text).is_none(), "{text:?} was taken");
        }
    }

    #[test]
    fn takes_labels_tables_before_after_or_alone() {
        let text = "[hives.b.labels]\nsite = \"x\"\n[hives.b]\nnkey = \"UB\"\n\
                    [hives.a]\n[hives.a.labels]\n\"rack no\" = 'r1'\n[hives.c.labels]\n";
        let s = split(text).expect("taken");
        assert_eq!(names(&s), ["a", "b", "c"]);
        assert_eq!(s.hives[0].entry.labels["rack no"], "r1");
        assert_eq!(s.hives[1].entry.labels["site"], "x");
        assert_eq!(s.hives[1].entry.nkey.as_deref(), Some("UB"));
        assert!(s.hives[2].entry.labels.is_empty());
        // Where the toml crate puts each: the header of [hives.<name>], or
        // the name in [hives.c.labels] for a hive given by that alone.
        assert_eq!(&text[s.hives[1].at..s.hives[1].at + 9], "[hives.b]");
        assert_eq!(&text[s.hives[2].at..s.hives[2].at + 8], "c.labels");
        assert_eq!(s.rest, "");
    }

    #[test]
    fn a_large_file_is_read_in_pieces_as_it_is_whole() {
        let (mut text, mut hives) = (String::from("a = 1\n"), 0);
        while text.len() <= TWO_THREADS_FROM {
            text.push_str(&format!(
                "[hives.h{hives:05}]\nnkey = \"U{hives}\"\n[hives.h{hives:05}.labels]\nsite = \"s\"\n"
            ));
            hives += 1;
        }
        text.push_str("[events]\nb = 2\n");
        let cuts = cuts(&text, PIECE_LEN);
        // Each piece is at least PIECE_LEN long and ends at the first
        // header after that (a hive's tables here are under 100 bytes).
        let bounds: Vec<usize> = [0]
            .into_iter()
            .chain(cuts.iter().copied())
            .chain([text.len()])
            .collect();
        for w in bounds.windows(2) {
            assert!(w[1] - w[0] < PIECE_LEN + 100, "{cuts:?}");
        }
        for w in bounds[..bounds.len() - 1].windows(2) {
            assert!(w[1] - w[0] >= PIECE_LEN, "{cuts:?}");
            assert!(text[w[1]..].starts_with("[hives.h") || text[w[1]..].starts_with("[events]"));
        }
        assert!(super::cuts(&text[..PIECE_LEN - 1], PIECE_LEN).is_empty());
        let pieces = split(&text).expect("taken");
        assert_eq!(pieces.hives.len(), hives);
        assert_eq!(pieces.rest, "a = 1\n[events]\nb = 2\n");
        let whole = format!("{:?}", split_at(&text, &[], 1).unwrap());
        assert_eq!(format!("{pieces:?}"), whole);
        assert_eq!(format!("{:?}", split_at(&text, &cuts, 1).unwrap()), whole);
        // A table given in two pieces is given twice: read whole.
        text.push_str("[hives.h00000]\n");
        assert!(split(&text).is_none());
    }

    #[test]
    fn a_header_inside_a_string_is_text() {
        let text = "x = \"\"\"\n[hives.a]\n\"\"\"\n";
        let s = split(text).expect("taken");
        assert!(s.hives.is_empty());
        assert_eq!(s.rest, text);
    }

    #[test]
    fn leaves_every_other_hives_table_in_the_rest() {
        for text in [
            "[hives.\"a\"]\n",
            "[hives.a.labels.x]\n",
            "[hives.'a'.labels]\n",
            "[[hives]]\n",
            "[hives]\n",
            "hives.a.nkey = \"U\"\n",
        ] {
            let s = split(text).expect("split");
            assert!(s.hives.is_empty(), "{text:?}");
            assert!(s.rest.contains("hives"), "{text:?}");
        }
    }
}
