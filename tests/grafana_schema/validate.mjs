// Type-checks Grafana dashboard JSON files against Grafana's own published schema (@grafana/schema).
// Each dashboard becomes a TypeScript module whose values must satisfy the schema's types: the dashboard as a whole
// against `Dashboard`, and each panel's `options` and `fieldConfig.defaults.custom` against its plugin's
// `Options`/`FieldConfig` (the composable panelcfg types). The TypeScript compiler does the checking, with its
// excess-property checks, so a misspelt or unknown key is an error as much as a wrong type.
// Usage: node validate.mjs DASHBOARD.json...   Exit 0 when all pass, 1 with one line per problem, 2 on bad input.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import ts from "typescript";

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(here, "package.json"));
const schemaDir = path.dirname(require.resolve("@grafana/schema/package.json"));
const schemaPkg = JSON.parse(fs.readFileSync(path.join(schemaDir, "package.json"), "utf8"));
// Keys of Grafana's "export for sharing externally" envelope, which the importer consumes before the model exists.
const ENVELOPE = ["__inputs", "__requires", "__elements"];

// Panel plugin id -> the declaration file of its schema, found in the package (so new plugins come for free).
const panelModules = new Map();
function scan(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) scan(full);
    const m = full.match(/raw[\\/]composable[\\/]([^\\/]+)[\\/]panelcfg[\\/]x[\\/][A-Za-z0-9_]*types\.gen\.d\.ts$/);
    if (!m || panelModules.has(m[1])) continue;
    const text = fs.readFileSync(full, "utf8");
    panelModules.set(m[1], {
      spec: full.slice(0, -".d.ts".length),
      options: /export interface Options\b/.test(text),
      fieldConfig: /export interface FieldConfig\b/.test(text),
    });
  }
}
scan(path.join(schemaDir, "dist"));

// The schema's enums as the string/number literals JSON carries; any other type unchanged, recursively.
const PRELUDE = `
import type * as G from "@grafana/schema";
type Json<T> = 0 extends 1 & T ? any
  : T extends string ? (string extends T ? string : \`\${T}\`)
  : T extends number | boolean | null | undefined ? T
  : T extends ReadonlyArray<infer U> ? Array<Json<U>>
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;
type FieldConfigOf<C> = Omit<G.FieldConfigSource, "defaults"> & {
  defaults: Omit<G.FieldConfig, "custom"> & { custom?: C };
};
type PanelOf<O, C> = Omit<G.Panel, "options" | "fieldConfig"> & { options?: O; fieldConfig?: FieldConfigOf<C> };
type Row = Omit<G.RowPanel, "panels"> & { panels: unknown[] };
`;

function panelsOf(dash) {
  const out = [];
  for (const p of dash.panels ?? []) {
    out.push(p);
    for (const q of p.panels ?? []) out.push(q);
  }
  return out;
}

/** The TypeScript module for one dashboard, and what each of its lines stands for (for error messages). */
function moduleFor(file, dash, problems) {
  const lines = PRELUDE.split("\n");
  const where = new Array(lines.length).fill("the schema prelude");
  const imports = new Map();
  const emit = (text, what) => {
    for (const line of text.split("\n")) {
      lines.push(line);
      where.push(what);
    }
  };
  const names = new Map();
  panelsOf(dash).forEach((p, i) => names.set(p, `panel${i}`));
  for (const [p, name] of names) {
    const what = `panel ${JSON.stringify(p.title ?? "")} (id ${p.id ?? "?"}, type ${p.type})`;
    let type;
    if (p.type === "row") {
      type = "Row";
    } else {
      const mod = panelModules.get(String(p.type).replace(/-/g, ""));
      if (!mod) {
        problems.push(`${file}: ${what}: no schema for panel type ${JSON.stringify(p.type)} in @grafana/schema`);
        continue;
      }
      if (!imports.has(mod.spec)) imports.set(mod.spec, `P${imports.size}`);
      const ns = imports.get(mod.spec);
      const options = mod.options ? `Json<${ns}.Options>` : "Record<string, unknown>";
      const custom = mod.fieldConfig ? `Json<${ns}.FieldConfig>` : "Record<string, unknown>";
      type = `Json<PanelOf<${options}, ${custom}>>`;
    }
    const value = { ...p };
    if (p.panels) value.panels = [];
    emit(`const ${name}: ${type} = ${JSON.stringify(value, null, 2)};`, what);
  }
  const top = Object.fromEntries(Object.entries(dash).filter(([k]) => !ENVELOPE.includes(k)));
  top.panels = [];
  const rows = (dash.panels ?? []).map((p) => {
    const kids = (p.panels ?? []).map((q) => names.get(q)).filter(Boolean);
    return kids.length || p.type === "row" ? `{ ...${names.get(p)}, panels: [${kids.join(", ")}] }` : names.get(p);
  });
  const body = JSON.stringify(top, null, 2).replace('"panels": []', `"panels": [${rows.filter(Boolean).join(", ")}]`);
  emit(`const dashboard = ${body} satisfies Json<G.Dashboard>;`, "the dashboard (outside its panels)");
  emit(`export { dashboard };`, "");
  const head = [...imports].map(([spec, ns]) => `import type * as ${ns} from ${JSON.stringify(spec)};`);
  return { text: [...head, ...lines].join("\n"), where: [...head.map(() => "imports"), ...where] };
}

function main(files) {
  if (!files.length) {
    console.error("usage: node validate.mjs DASHBOARD.json...");
    return 2;
  }
  const problems = [];
  const sources = new Map();
  for (const file of files) {
    let dash;
    try {
      dash = JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (e) {
      console.error(`${file}: ${e.message}`);
      return 2;
    }
    const name = path.join(here, ".check", path.basename(file).replace(/\.json$/, "") + ".ts");
    sources.set(name, { file, ...moduleFor(file, dash, problems) });
  }
  const options = {
    strict: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler, types: [],
  };
  const host = ts.createCompilerHost(options);
  const read = host.readFile.bind(host);
  host.readFile = (f) => (sources.has(f) ? sources.get(f).text : read(f));
  const exists = host.fileExists.bind(host);
  host.fileExists = (f) => sources.has(f) || exists(f);
  const getSource = host.getSourceFile.bind(host);
  host.getSourceFile = (f, lang, ...rest) =>
    sources.has(f) ? ts.createSourceFile(f, sources.get(f).text, lang) : getSource(f, lang, ...rest);
  const program = ts.createProgram([...sources.keys()], options, host);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, " ").replace(/\s+/g, " ");
    const src = d.file && sources.get(d.file.fileName);
    if (!src) {
      problems.push(`schema: ${message}`);
      continue;
    }
    const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
    const text = src.text.split("\n")[line].trim();
    problems.push(`${src.file}: ${src.where[line]}: at \`${text}\`: ${message}`);
  }
  for (const p of problems) console.log(p);
  if (!problems.length) console.log(`${files.length} dashboards match @grafana/schema ${schemaPkg.version}`);
  return problems.length ? 1 : 0;
}

process.exit(main(process.argv.slice(2)));
