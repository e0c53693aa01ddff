// Builds the inspector into ../memmachine_server/ui/static: app.js (one minified bundle),
// app.css and index.html. The output depends only on the sources and the locked packages,
// so CI rebuilds it and checks that the committed files match.
import { copyFile, mkdir } from "node:fs/promises";
import { build } from "esbuild";

const out = new URL("../memmachine_server/ui/static/", import.meta.url);
await mkdir(out, { recursive: true });
await build({
  entryPoints: ["src/main.tsx"],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2020",
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "eof",
  charset: "utf8",
  outfile: new URL("app.js", out).pathname,
  logLevel: "warning",
});
await copyFile("src/index.html", new URL("index.html", out));
await copyFile("src/app.css", new URL("app.css", out));
