// Bundles src/ into the shipped ES modules; tsc has already type-checked
// src/ and written its declarations to dist/types/.
import { writeFile } from "node:fs/promises";
import { build } from "esbuild";

const common = {
  entryPoints: ["src/index.ts"],
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  legalComments: "none",
  logLevel: "warning",
};

await build({ ...common, outfile: "dist/durablecache.js" });
await build({ ...common, outfile: "dist/durablecache.min.js", minify: true });
await writeFile("dist/durablecache.d.ts", 'export * from "./types/index.js";\n');
