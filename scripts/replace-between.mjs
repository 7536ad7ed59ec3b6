// Replace the text between two marker strings of a file with another file's
// content. Used by `make docs` to keep README's generated sections current.
import { readFileSync, writeFileSync } from "node:fs";

const [path, start, end, src] = process.argv.slice(2);
const text = readFileSync(path, "utf8");
const a = text.indexOf(start);
const b = text.indexOf(end);
if (a < 0 || b < a) {
  console.error(`markers ${start} … ${end} not found in ${path}`);
  process.exit(1);
}
writeFileSync(path, text.slice(0, a + start.length) + "\n" + readFileSync(src, "utf8") + text.slice(b));
