// Opens a page `revl view` wrote in Debian's headless Chromium (through playwright-core,
// pinned in .ci/setup-mcp-clients) and checks what a person sees. Driven by
// crates/revl/tests/it/seeing.rs, which passes what to expect as one JSON argument:
// {html, screenshot, sessions: [id], tree: [[id, parentId|null]], crossed: {session, label},
//  search: {query, only}, top: {session, step, tool}, paths: [{query, only}],
//  rewoundBy: {session, branch}}. Exits non-zero on the first failed check.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.REVL_TEST_VIEW_NODE_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");
const want = JSON.parse(process.argv[2]);
let checks = 0;
function check(cond, what, detail) {
  checks++;
  if (!cond) {
    console.error(`FAILED: ${what}${detail === undefined ? "" : "\n" + JSON.stringify(detail, null, 2)}`);
    process.exit(1);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.REVL_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto("file://" + want.html, { waitUntil: "load" });
  const loadMs = Date.now() - t0;

  // Nothing but the file itself was fetched, and the script ran without errors.
  check(requests.length === 1 && requests[0].startsWith("file://"), "the page loads nothing from anywhere", requests);
  check(errors.length === 0, "no script errors", errors);

  // The first screen, before any click: what crossed, every crossing with its session,
  // step and tool, in view without scrolling.
  const top = page.locator("#crossed");
  check(await top.isVisible(), "the crossed summary is visible without expanding anything");
  const topRow = top.locator("tbody tr", { hasText: want.top.tool });
  check(await topRow.count() === 1 && await topRow.isVisible(), "the crossing has its row", await top.textContent());
  const box = await topRow.boundingBox();
  check(box && box.y + box.height <= 900, "the crossing is on the first screen", box);
  const cells = await topRow.locator("td").allTextContents();
  check(cells[0] === want.top.session.slice(0, 8) && cells[1] === String(want.top.step), "it names the session and the step", cells);

  // The tree: every session, each under its parent.
  const tree = page.locator("#tree");
  check(await tree.isVisible(), "the branch tree is visible");
  for (const [id, parent] of want.tree) {
    const link = tree.locator(`a[href="#s-${id}"]`);
    check(await link.count() === 1 && await link.isVisible(), `the tree shows ${id.slice(0, 8)}`);
    check((await link.textContent()) === id.slice(0, 8), "a session is named by its first 8 characters");
    const parentOfLink = await link.evaluate((a) => {
      const ul = a.closest("li").parentElement;
      const li = ul.closest("li");
      return li ? li.querySelector(":scope > a").getAttribute("href").slice(3) : null;
    });
    check(parentOfLink === parent, `${id.slice(0, 8)} hangs under its parent`, { parentOfLink, parent });
  }

  // Collapsed by default: no session is open.
  const sections = page.locator("details.session");
  check(await sections.count() === want.sessions.length, "one section per session");
  check(await page.locator("details.session[open]").count() === 0, "every timeline starts collapsed");

  // The crossed emission is in A's timeline: hidden until a click expands it.
  const sec = page.locator(`#s-${want.crossed.session}`);
  const row = sec.locator("tr", { hasText: want.crossed.label });
  check(await row.count() === 1, "the emission's row exists", await row.count());
  check(!(await row.isVisible()), "the row is hidden while the timeline is collapsed");
  await sec.locator("summary").click();
  check(await row.isVisible(), "a click on the session expands its timeline");
  const mark = row.locator(".irrev");
  check(await mark.isVisible() && /crossed · irreversible/.test(await mark.textContent()), "the crossed emission is marked irreversible", await row.textContent());
  const color = await mark.evaluate((el) => getComputedStyle(el).color);
  check(color === "rgb(179, 38, 30)", "the mark stands out in red", color);
  const rewound = sec.locator("tr.undone");
  check(await rewound.count() >= 1 && /rewound/.test(await rewound.first().textContent()), "rewound steps are marked");
  // ...and say what rewound them: the fork, with the branch it made.
  const by = page.locator(`#s-${want.rewoundBy.session} tr.undone a[href="#s-${want.rewoundBy.branch}"]`);
  check(await by.count() >= 1 && /rewound by the fork at step/.test(await by.first().evaluate((a) => a.parentElement.textContent)), "a rewound step names the fork that rewound it");
  await page.screenshot({ path: want.screenshot, fullPage: true });

  // The search box narrows the sessions to those whose text holds the query.
  await page.fill("#q", want.search.query);
  const shown = await page.locator("details.session:not(.hidden)").evaluateAll((ds) => ds.map((d) => d.id.slice(2)));
  check(JSON.stringify(shown) === JSON.stringify([want.search.only]), "search shows only the matching session", shown);
  // An exec step is found by a path it changed and by its command.
  for (const p of want.paths) {
    await page.fill("#q", p.query);
    const hit = await page.locator("details.session:not(.hidden)").evaluateAll((ds) => ds.map((d) => d.id.slice(2)));
    check(JSON.stringify(hit) === JSON.stringify([p.only]), `search for ${p.query} finds the exec step's session`, hit);
    const cell = page.locator(`#s-${p.only} td.l`, { hasText: p.query });
    check(await cell.count() >= 1 && await cell.first().isVisible(), `${p.query} is shown on the exec step`);
  }
  await page.fill("#q", "");
  check(await page.locator("details.session.hidden").count() === 0, "clearing the search shows every session again");
  console.log(`view checks passed: ${checks} checks, page loaded in ${loadMs} ms`);
} finally {
  await browser.close();
}
