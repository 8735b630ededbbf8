// Prints the minified and gzipped size of the browser bundle.
import { readFile } from "node:fs/promises";
import { gzipSync } from "node:zlib";

const min = await readFile("dist/durablecache.min.js");
const gz = gzipSync(min, { level: 9 });
console.log(`dist/durablecache.min.js: ${min.length} bytes, ${gz.length} gzipped`);
