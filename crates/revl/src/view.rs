//! `revl view`: one self-contained HTML page of the store's lineage (docs/user-guide.md
//! §7). Everything is inline (styles, a few lines of script for the search box), nothing is
//! fetched; the page is a pure function of the WALs, so the same store gives the same
//! bytes. Every session's timeline sits in a collapsed `<details>`: a browser lays out only
//! what is opened, which keeps a store of 500 sessions and 10,000 steps quick to open and
//! to search.

use revl_core::lineage::OfflineWal;
use revl_core::log::{self, Log, LogSession};
use revl_core::step::StepKind;
use revl_core::{Error, Store};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// What `view` wrote.
#[derive(Debug, Serialize)]
pub struct ViewReport {
    pub out: String,
    pub sessions: usize,
    pub steps: usize,
    pub bytes: usize,
}

/// Text made safe for HTML element content and quoted attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\t' => {
                let _ = write!(o, "\\u{{{:x}}}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

const STYLE: &str = r#"
:root{--fg:#1d2430;--mut:#5b6472;--bg:#fff;--line:#e3e6ea;--bad:#b3261e;--ok:#1e7b34;--warn:#8a5a00}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:1200px;padding:16px 24px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
code,.id,td.n{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.mut{color:var(--mut)}
#q{width:100%;padding:8px 10px;font-size:14px;border:1px solid #c6ccd3;border-radius:6px;margin:12px 0}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:22px}ul.tree{padding-left:0}
ul.tree li{margin:3px 0;position:relative}
ul.tree ul li::before{content:"";position:absolute;left:-14px;top:0;width:10px;height:11px;border-left:1px solid #aab;border-bottom:1px solid #aab}
.badge{display:inline-block;border-radius:10px;padding:0 7px;font-size:12px;border:1px solid var(--line);margin-left:4px}
.st-live{background:#e7f4ea;color:var(--ok)}.st-frozen{background:#eef0f3}.st-committed{background:#e8effa;color:#1f4e99}.st-aborted{background:#f6e8e7;color:var(--bad)}.st-unreadable{background:#fde7e6;color:var(--bad)}
.dirty{background:#fde7e6;color:var(--bad);font-weight:600}.clean{background:#e7f4ea;color:var(--ok)}
details.session{border:1px solid var(--line);border-radius:8px;margin:8px 0;padding:0 12px}
details.session>summary{cursor:pointer;padding:8px 0;list-style-position:outside}
details.session[open]>summary{border-bottom:1px solid var(--line)}
.facts{margin:8px 0;display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}
.facts dt{color:var(--mut)}.facts dd{margin:0}
table.tl{border-collapse:collapse;width:100%;margin:8px 0 12px}
table.tl th{text-align:left;font-weight:600;color:var(--mut);border-bottom:1px solid var(--line);padding:3px 6px}
table.tl td{padding:3px 6px;border-bottom:1px solid #f0f2f4;vertical-align:top}
td.n{text-align:right;color:var(--mut);width:4em}
.k{display:inline-block;min-width:92px;border-radius:4px;padding:0 6px;font-size:12px}
.k-effect{background:#e6effc}.k-provision{background:#e3f5f2}.k-emission{background:#fde7e6}.k-compensation{background:#fff0dc}.k-boundary,.k-hinge{background:#f0f1f3}.k-opaque{background:#f0e6fa}
tr.undone td.l{text-decoration:line-through;color:var(--mut)}
.irrev{color:var(--bad);font-weight:600}
.held{color:var(--warn)}
.ckpt{color:#1f4e99}
.hidden{display:none}
.ch{font-size:12px;margin-top:2px}code.argv{color:var(--mut)}
"#;

/// The search box: hide the sessions whose text does not contain the query, open those
/// whose steps match (when there are few). Each session's text is read once, at the first
/// search, and searched from then on.
const SCRIPT: &str = r#"
(function(){
var q=document.getElementById('q'),all=[].slice.call(document.querySelectorAll('details.session')),n=document.getElementById('nmatch'),text=null,last=null;
function run(){
  var t=q.value.trim().toLowerCase(),shown=0;
  if(t===last)return;last=t;
  if(t&&!text)text=all.map(function(d){return d.textContent.toLowerCase();});
  all.forEach(function(d,i){var hit=!t||text[i].indexOf(t)>=0;if(d.classList.contains('hidden')===hit)d.classList.toggle('hidden',!hit);if(hit)shown++;});
  if(t&&shown<=20)all.forEach(function(d){if(!d.classList.contains('hidden'))d.open=true;});
  n.textContent=t?shown+' of '+all.length+' session(s) match':'';
}
q.addEventListener('input',run);
})();
"#;

pub fn write(store: &Store, session: Option<&str>, out: &Path) -> Result<ViewReport, Error> {
    let loaded = log::load(store)?;
    let only = session.map(|s| store.resolve(s)).transpose()?;
    let lg = log::log_of(&loaded, only.as_deref());
    let wals: BTreeMap<&str, &OfflineWal> = loaded
        .iter()
        .filter_map(|l| l.wal.as_ref().ok().map(|w| (l.id.as_str(), w)))
        .collect();
    let (html, steps) = page(store, &lg, &wals);
    write_atomic(out, html.as_bytes())?;
    Ok(ViewReport {
        out: out.display().to_string(),
        sessions: lg.sessions.len(),
        steps,
        bytes: html.len(),
    })
}

/// Written next to its place and renamed in: a reader never sees half a page.
fn write_atomic(out: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    out.file_name().ok_or_else(|| {
        Error::bad_args(
            format!("--out {} names no file", out.display()),
            "give a file name, e.g. --out lineage.html",
        )
    })?;
    if out.is_dir() {
        return Err(Error::bad_args(
            format!("--out {} is a directory", out.display()),
            "give a file name, e.g. --out lineage.html",
        ));
    }
    // A fresh name, created exclusively: in a shared directory (/tmp) a symlink planted at a
    // predictable name cannot redirect the write.
    let tmp = dir.join(format!(".revl-view-{}.tmp", revl_core::util::new_id()));
    let fail = |e: std::io::Error| Error::io(format!("cannot write {}", out.display()), e);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, bytes));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

fn state_badge(state: &str) -> String {
    format!("<span class=\"badge st-{0}\">{0}</span>", esc(state))
}

fn page(store: &Store, lg: &Log, wals: &BTreeMap<&str, &OfflineWal>) -> (String, usize) {
    let steps: usize = lg
        .sessions
        .iter()
        .filter_map(|x| wals.get(x.session.as_str()))
        .map(|w| w.state.steps.len())
        .sum();
    let mut h = String::with_capacity(4096 + steps * 200);
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\
<title>revl lineage</title><style>{STYLE}</style></head><body>\n\
<h1>revl lineage</h1><p class=\"mut\">store <code>{}</code> · {} session(s) · {} step(s) · \
steps struck through were rewound; <span class=\"irrev\">crossed</span> marks what left the machine and cannot be taken back</p>\n",
        esc(&store.root().display().to_string()),
        lg.sessions.len(),
        steps
    );
    crossed(&mut h, lg, wals);
    h.push_str("<h2>Branch tree</h2>\n<ul class=\"tree\" id=\"tree\">\n");
    tree(&mut h, lg);
    h.push_str("</ul>\n<h2>Sessions</h2>\n<input id=\"q\" type=\"search\" placeholder=\"search sessions, steps, paths, hashes…\" aria-label=\"search\"><div id=\"nmatch\" class=\"mut\"></div>\n");
    for x in &lg.sessions {
        session(&mut h, x, wals.get(x.session.as_str()).copied(), lg);
    }
    let _ = write!(h, "<script>{SCRIPT}</script>\n</body></html>\n");
    (h, steps)
}

fn tree(h: &mut String, lg: &Log) {
    let mut kids: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &lg.edges {
        kids.entry(e.parent.as_str()).or_default().push(&e.branch);
    }
    let byid: BTreeMap<&str, &LogSession> = lg
        .sessions
        .iter()
        .map(|x| (x.session.as_str(), x))
        .collect();
    fn node(
        h: &mut String,
        id: &str,
        byid: &BTreeMap<&str, &LogSession>,
        kids: &BTreeMap<&str, Vec<&str>>,
        depth: usize,
    ) {
        h.push_str("<li>");
        match byid.get(id) {
            Some(x) => {
                let _ = write!(
                    h,
                    "<a class=\"id\" href=\"#s-{0}\" title=\"{0}\">{1}</a>{2}",
                    esc(id),
                    esc(short(id)),
                    state_badge(x.state)
                );
                if let (Some(at), Some(mode)) = (x.at, x.mode) {
                    let clean = x.residue_clean != Some(false);
                    let _ = write!(
                        h,
                        " <span class=\"mut\">{mode} fork at step {at}</span> <span class=\"badge {}\">residue {}{}</span>",
                        if clean { "clean" } else { "dirty" },
                        if clean { "clean" } else { "NOT CLEAN" },
                        inherited(x)
                    );
                }
                let _ = write!(h, " <span class=\"mut\">head {}</span>", x.head);
                if x.queued > 0 {
                    let _ = write!(h, " <span class=\"held\">{} held</span>", x.queued);
                }
                if x.pending_approvals > 0 {
                    let _ = write!(
                        h,
                        " <span class=\"held\">{} approval(s) pending</span>",
                        x.pending_approvals
                    );
                }
            }
            None => {
                let _ = write!(
                    h,
                    "<span class=\"id\">{}</span> <span class=\"mut\">(WAL missing)</span>",
                    esc(short(id))
                );
            }
        }
        // A cycle cannot come from real WALs; the depth bound keeps a forged one finite.
        if let Some(list) = kids.get(id).filter(|_| depth < 10_000) {
            h.push_str("<ul>");
            for k in list {
                node(h, k, byid, kids, depth + 1);
            }
            h.push_str("</ul>");
        }
        h.push_str("</li>\n");
    }
    let known: std::collections::BTreeSet<&str> = byid.keys().copied().collect();
    for x in &lg.sessions {
        if x.parent.as_deref().is_none_or(|p| !known.contains(p)) {
            node(h, &x.session, &byid, &kids, 0);
        }
    }
}

fn session(h: &mut String, x: &LogSession, w: Option<&OfflineWal>, lg: &Log) {
    let id = esc(&x.session);
    let _ = write!(
        h,
        "<details class=\"session\" id=\"s-{id}\"><summary><span class=\"id\">{id}</span>{} <span class=\"mut\">head {} · {}</span>",
        state_badge(x.state),
        x.head,
        esc(&x.workspace)
    );
    if let (Some(at), Some(mode)) = (x.at, x.mode) {
        let _ = write!(h, " <span class=\"mut\">· {mode} fork at step {at}</span>");
    }
    h.push_str("</summary>\n");
    let Some(w) = w else {
        let msg = x
            .error
            .as_ref()
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str())
            .unwrap_or("the WAL could not be read");
        let _ = writeln!(h, "<p class=\"irrev\">{}</p></details>", esc(msg));
        return;
    };
    let st = &w.state;
    h.push_str("<dl class=\"facts\">");
    let _ = write!(
        h,
        "<dt>wal</dt><dd><code>{}</code></dd>",
        esc(&w.path.display().to_string())
    );
    if let Some(o) = &st.origin {
        let _ = write!(
            h,
            "<dt>branch of</dt><dd><a class=\"id\" href=\"#s-{0}\">{1}</a> after its step {2} (its steps up to {2} are this branch's past)</dd>",
            esc(&o.parent),
            esc(short(&o.parent)),
            o.at
        );
        for r in &x.residue_forks {
            let whose = if r.branch == x.session {
                "the fork that made this branch".to_string()
            } else {
                format!(
                    "inherited from the fork of <a class=\"id\" href=\"#s-{0}\">{1}</a> at step {2} (which made <a class=\"id\" href=\"#s-{3}\">{4}</a>)",
                    esc(&r.parent),
                    esc(short(&r.parent)),
                    r.at,
                    esc(&r.branch),
                    esc(short(&r.branch))
                )
            };
            let _ = write!(
                h,
                "<dt>residue</dt><dd class=\"irrev\">NOT CLEAN, {whose}: step(s) {:?} of <a class=\"id\" href=\"#s-{}\">{}</a> stay out in the world or unrestored</dd>",
                r.outstanding,
                esc(&r.parent),
                esc(short(&r.parent))
            );
        }
    }
    for f in &st.forks {
        let into = f
            .into
            .as_ref()
            .map(|d| format!(" into <code>{}</code>", esc(d)))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<dt>fork</dt><dd>{} at step {} → <a class=\"id\" href=\"#s-{}\">{}</a>{into} · hash <code>{}</code> · {}{}</dd>",
            f.mode,
            f.at,
            esc(&f.branch),
            esc(short(&f.branch)),
            esc(f.hash.as_deref().unwrap_or("-")),
            if f.outcome == "abandoned" {
                "<span class=\"irrev\">ABANDONED</span> (no branch was made)"
            } else {
                f.outcome
            },
            f.why
                .as_ref()
                .map(|y| format!(": {}", esc(y)))
                .unwrap_or_default()
        );
    }
    for (seq, d) in &st.deferred {
        let what = if st.flushed.contains(seq) {
            "<span class=\"irrev\">sent at commit · crossed, irreversible</span>".to_string()
        } else if let Some(by) = st.dropped.get(seq) {
            format!("dropped by {} (never sent)", esc(by))
        } else if let Some(e) = st.residue.get(seq) {
            format!(
                "<span class=\"irrev\">send failed or unknown</span> {}",
                esc(&e.to_string())
            )
        } else {
            "<span class=\"held\">held: fires only at a confirmed commit</span>".to_string()
        };
        let _ = write!(
            h,
            "<dt>held send {seq}</dt><dd>{} <code>{}</code> after step {} — {what}</dd>",
            esc(&d.tool),
            esc(&clip(&d.args.to_string(), 300)),
            d.after_step
        );
    }
    for p in &st.preserved {
        let _ = write!(
            h,
            "<dt>preserved drift</dt><dd><code>{}</code> (changed outside revl, saved before step {} was rewound) · <code>revl blob {}</code></dd>",
            esc(&p.path),
            p.step,
            esc(&p.digest)
        );
    }
    for t in log::pending(&x.session, st) {
        let _ = write!(
            h,
            "<dt>approval pending</dt><dd><span class=\"held\">{}</span> would send <code>{}</code> · <code>{}</code></dd>",
            esc(&t.tool),
            esc(&clip(&t.args.to_string(), 300)),
            esc(&t.approve)
        );
    }
    let kids: Vec<_> = lg.edges.iter().filter(|e| e.parent == x.session).collect();
    for e in kids {
        if !st.forks.iter().any(|f| f.branch == e.branch) {
            let _ = write!(
                h,
                "<dt>branch</dt><dd><a class=\"id\" href=\"#s-{0}\">{1}</a> at step {2}</dd>",
                esc(&e.branch),
                esc(short(&e.branch)),
                e.at
            );
        }
    }
    h.push_str("</dl>\n<table class=\"tl\"><thead><tr><th>step</th><th>kind</th><th>label <span class=\"mut\">site</span></th><th>what became of it</th></tr></thead><tbody>\n");
    for s in &st.steps {
        let kind = s.kind.as_str();
        let mut status = Vec::new();
        if s.kind == StepKind::Emission {
            status.push(match s.compensation {
                Some(c) => format!(
                    "<span class=\"irrev\">crossed · irreversible</span> (compensated by step {c})"
                ),
                None => "<span class=\"irrev\">crossed · irreversible</span>".to_string(),
            });
        }
        if s.undone {
            status.push(rewound_by(s, st));
        } else if s.crossed {
            status.push("stepped over by a rewind: stays out in the world".into());
        }
        if s.fenced {
            status.push("inverse outcome unknown".into());
        }
        for (_, id) in st.checkpoints.iter().filter(|(at, _)| *at == s.index) {
            status.push(format!(
                "<span class=\"ckpt\">checkpoint <code>{}</code></span>",
                esc(id)
            ));
        }
        let mut label = esc(s.label());
        let mut changes = String::new();
        if s.site() == "exec" {
            let detail = s.detail();
            if let Some(argv) = detail.get("argv").and_then(|a| a.as_array()) {
                let cmd: Vec<&str> = argv.iter().filter_map(|a| a.as_str()).collect();
                let _ = write!(
                    label,
                    " <code class=\"argv\">{}</code>",
                    esc(&clip(&cmd.join(" "), ARGV_SHOWN))
                );
            }
            changes = exec_changes(detail);
            label.push_str(&net_dests(detail));
        }
        let _ = writeln!(
            h,
            "<tr class=\"{}\"><td class=\"n\">{}</td><td><span class=\"k k-{}\">{}</span></td><td class=\"l\">{label} <span class=\"mut\">{}</span>{changes}</td><td>{}</td></tr>",
            if s.undone { "undone" } else { "" },
            s.index,
            esc(kind),
            esc(kind),
            esc(s.site()),
            status.join(" · ")
        );
    }
    h.push_str("</tbody></table></details>\n");
}

/// An exec's network emission (docs/user-guide.md §8): the destinations it reached, named.
fn net_dests(detail: &serde_json::Value) -> String {
    let names = crate::render::reached_destinations(detail);
    if names.is_empty() {
        return String::new();
    }
    format!(
        " <span class=\"net\">reached {}</span>",
        esc(&names.join(", "))
    )
}

/// How much of an exec's argv the timeline shows, and how many of its changed paths.
const ARGV_SHOWN: usize = 120;
const CHANGES_SHOWN: usize = 50;

/// An exec step's changed paths (`detail.changes`), each with its change, so the search box
/// finds a step by a path it changed.
fn exec_changes(detail: &serde_json::Value) -> String {
    let Some(list) = detail.get("changes").and_then(|c| c.as_array()) else {
        return String::new();
    };
    if list.is_empty() {
        return "<div class=\"ch mut\">no change</div>".into();
    }
    let mut out = String::from("<div class=\"ch\">");
    for c in list.iter().take(CHANGES_SHOWN) {
        let field = |k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let _ = write!(
            out,
            "<span class=\"mut\">{}</span> <code>{}</code> ",
            esc(field("change")),
            esc(field("path"))
        );
    }
    if list.len() > CHANGES_SHOWN {
        let _ = write!(
            out,
            "<span class=\"mut\">and {} more (revl inspect-step)</span>",
            list.len() - CHANGES_SHOWN
        );
    }
    out.push_str("</div>");
    out
}

/// What rewound a step: the fork (its branch and k), a step-back or an abort.
fn rewound_by(s: &revl_core::step::Step, st: &revl_core::state::State) -> String {
    match s.undone_by.as_deref() {
        Some(revl_core::step::BY_FORK) => {
            // Only a serial fork rewinds its parent's own steps: the last one below the step.
            let fork = st
                .forks
                .iter()
                .rev()
                .find(|f| f.mode == "serial" && f.at.first_above() <= s.index);
            match fork {
                Some(f) => format!(
                    "rewound by the fork at step {} → <a class=\"id\" href=\"#s-{}\">{}</a>{}",
                    f.at,
                    esc(&f.branch),
                    esc(short(&f.branch)),
                    if f.outcome == "abandoned" {
                        " (abandoned)"
                    } else {
                        ""
                    }
                ),
                None => "rewound by a fork".into(),
            }
        }
        Some(revl_core::step::BY_STEP_BACK) => "rewound by a step-back".into(),
        Some(revl_core::step::BY_ABORT) => "rewound by the abort".into(),
        Some(other) => format!("rewound ({})", esc(other)),
        None => "rewound".into(),
    }
}

/// What crossed, at the top of the page, open: every emission that fired and every held
/// send a commit sent (or whose send has an unknown outcome), across the sessions shown.
fn crossed(h: &mut String, lg: &Log, wals: &BTreeMap<&str, &OfflineWal>) {
    let mut rows = String::new();
    let mut n = 0;
    for x in &lg.sessions {
        let Some(w) = wals.get(x.session.as_str()) else {
            continue;
        };
        let st = &w.state;
        let who = format!(
            "<a class=\"id\" href=\"#s-{0}\" title=\"{0}\">{1}</a>",
            esc(&x.session),
            esc(short(&x.session))
        );
        for s in st.steps.iter().filter(|s| s.kind == StepKind::Emission) {
            n += 1;
            let _ = writeln!(
                rows,
                "<tr><td>{who}</td><td class=\"n\">{}</td><td>{} <span class=\"mut\">{}</span>{}</td><td><span class=\"irrev\">emission · irreversible</span>{}</td></tr>",
                s.index,
                esc(s.site()),
                esc(s.label()),
                net_dests(s.detail()),
                s.compensation
                    .map(|c| format!(" (compensated by step {c})"))
                    .unwrap_or_default()
            );
        }
        for (seq, d) in &st.deferred {
            let what = if st.flushed.contains(seq) {
                "sent at commit · irreversible"
            } else if st.residue.contains_key(seq) {
                "send failed or unknown: may have crossed"
            } else {
                continue;
            };
            n += 1;
            let _ = writeln!(
                rows,
                "<tr><td>{who}</td><td class=\"n\">after {}</td><td>{} <span class=\"mut\">held send {seq}</span></td><td><span class=\"irrev\">{what}</span></td></tr>",
                d.after_step,
                esc(&d.tool)
            );
        }
    }
    h.push_str("<h2>What crossed</h2>\n");
    if n == 0 {
        h.push_str("<p id=\"crossed\" class=\"mut\">nothing left the machine: no emission fired, no held send was sent</p>\n");
        return;
    }
    let _ = write!(
        h,
        "<table class=\"tl\" id=\"crossed\"><thead><tr><th>session</th><th>step</th><th>tool</th><th>{n} crossing(s): out in the world, no rewind takes them back</th></tr></thead><tbody>\n{rows}</tbody></table>\n"
    );
}

/// A branch's residue that came from above it: " (inherited from fork of P at K; …)", or
/// "" when there is none (see `revl_core::log::lineage_residue`).
fn inherited(x: &LogSession) -> String {
    let up: Vec<String> = x
        .residue_forks
        .iter()
        .filter(|r| r.branch != x.session)
        .map(|r| format!("fork of {} at {}", esc(short(&r.parent)), r.at))
        .collect();
    match (up.is_empty(), x.residue_forks.len() > up.len()) {
        (true, _) => String::new(),
        (false, false) => format!(" (inherited from {})", up.join("; ")),
        (false, true) => format!(" (also inherited from {})", up.join("; ")),
    }
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}
