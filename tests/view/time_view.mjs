// Times a page `revl view` wrote in Debian's headless Chromium (playwright-core, as in
// check_view.mjs): load, a search over every session, and expanding one timeline. Used by
// `cargo bench -p revl --bench revl -- view`; prints one JSON line.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.REVL_TEST_VIEW_NODE_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");
const [html, query] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.REVL_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  let t = Date.now();
  await page.goto("file://" + html, { waitUntil: "load" });
  const loadMs = Date.now() - t;
  const sessions = await page.locator("details.session").count();
  t = Date.now();
  await page.fill("#q", query);
  await page.waitForFunction(() => document.getElementById("nmatch").textContent.length > 0);
  const shown = await page.locator("details.session:not(.hidden)").count();
  const searchMs = Date.now() - t;
  t = Date.now();
  await page.fill("#q", "session 12");
  await page.waitForFunction(() => /session\(s\) match/.test(document.getElementById("nmatch").textContent) && document.getElementById("q").value === "session 12");
  const searchAgainMs = Date.now() - t;
  t = Date.now();
  await page.fill("#q", "");
  const first = page.locator("details.session").first();
  await first.locator("summary").click();
  await first.locator("tbody tr").last().waitFor({ state: "visible" });
  const expandMs = Date.now() - t;
  console.log(JSON.stringify({ sessions, loadMs, searchMs, searchAgainMs, shown, expandMs }));
} finally {
  await browser.close();
}
