// The client's types against the service's OpenAPI document (docs/openapi.json, which the
// service's own tests keep equal to what it serves): every interface in src/types.ts is a schema
// of the document with the same fields, the same required ones, the same nullable ones and the
// same kinds of values; every string union is the schema's enum; the Event union has the
// document's tags. A schema the client does not mirror must be named in NOT_MIRRORED, so a new
// one in the document fails this test until the client decides.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import ts from "typescript";
import { REPO } from "./helpers.js";

type Schema = Record<string, any>;

const doc = JSON.parse(readFileSync(join(REPO, "docs/openapi.json"), "utf8"));
const schemas: Record<string, Schema> = doc.components.schemas;
const source = ts.createSourceFile(
  "types.ts",
  readFileSync(join(REPO, "clients/typescript/src/types.ts"), "utf8"),
  ts.ScriptTarget.Latest,
  true,
);

/** Schemas the client has no type for, and why. */
const NOT_MIRRORED: Record<string, string> = {
  ExportFormat: "an argument: `exportFeedback(format: \"pairs\" | \"runs\")`",
  TaskList: "the dashboard's data (GET /v1/tasks), not in the client's surface",
  TaskSummary: "the dashboard's data",
  VerdictBrief: "the dashboard's data",
  LoopList: "the dashboard's data (GET /v1/loops)",
  LoopItem: "the dashboard's data",
  ResolutionView: "the dashboard's data",
  Stats: "the dashboard's data (GET /v1/stats)",
  Figures: "the dashboard's data",
  LatencyMs: "the dashboard's data",
  ClaudeCodeHook: "a coding agent's hook input (POST /v1/hooks/claude-code), not the client's",
  GeminiCliHook: "a coding agent's hook input (POST /v1/hooks/gemini-cli)",
  HookAnswer: "a coding agent's hook output",
  HookSpecificOutput: "a coding agent's hook output",
  OtlpTraces: "OTLP/HTTP traces in (POST /v1/traces): an OpenTelemetry exporter's, not the client's",
  OtlpResourceSpans: "OTLP",
  OtlpScopeSpans: "OTLP",
  OtlpSpan: "OTLP",
  OtlpKeyValue: "OTLP",
  OtlpAnyValue: "OTLP",
};

interface Prop {
  optional: boolean;
  nullable: boolean;
  /** string, number, boolean, array, object, any, or a type's name. */
  kind: string;
}

function tsKind(node: ts.TypeNode): string {
  if (ts.isArrayTypeNode(node)) return "array";
  if (ts.isParenthesizedTypeNode(node)) return tsKind(node.type);
  if (ts.isTypeReferenceNode(node)) {
    const name = node.typeName.getText(source);
    if (name === "Record") return "object";
    if (name === "Array") return "array";
    return name;
  }
  switch (node.kind) {
    case ts.SyntaxKind.StringKeyword:
      return "string";
    case ts.SyntaxKind.NumberKeyword:
      return "number";
    case ts.SyntaxKind.BooleanKeyword:
      return "boolean";
    case ts.SyntaxKind.UnknownKeyword:
      return "any";
  }
  return node.getText(source);
}

function tsProp(m: ts.PropertySignature): Prop {
  const members = m.type && ts.isUnionTypeNode(m.type) ? [...m.type.types] : m.type ? [m.type] : [];
  const isNull = (t: ts.TypeNode) => ts.isLiteralTypeNode(t) && t.literal.kind === ts.SyntaxKind.NullKeyword;
  const rest = members.filter((t) => !isNull(t));
  assert.equal(rest.length, 1, `${m.name.getText(source)}: one type (and null) per field`);
  return { optional: !!m.questionToken, nullable: members.some(isNull), kind: tsKind(rest[0]!) };
}

function schemaProp(p: Schema): Omit<Prop, "optional"> {
  let nullable = false;
  let parts: Schema[] = [p];
  if (p.oneOf) parts = p.oneOf;
  const kinds = new Set<string>();
  for (const part of parts) {
    if (part.$ref) {
      kinds.add(part.$ref.split("/").at(-1));
      continue;
    }
    const types: string[] = Array.isArray(part.type) ? part.type : part.type ? [part.type] : [];
    if (!types.length) kinds.add("any");
    for (const t of types) {
      if (t === "null") nullable = true;
      else kinds.add(t === "integer" ? "number" : t);
    }
  }
  assert.equal(kinds.size, 1, `one kind of value: ${JSON.stringify(p)}`);
  return { nullable, kind: [...kinds][0]! };
}

const interfaces = new Map<string, ts.InterfaceDeclaration>();
const aliases = new Map<string, ts.TypeAliasDeclaration>();
for (const s of source.statements) {
  if (ts.isInterfaceDeclaration(s)) interfaces.set(s.name.text, s);
  if (ts.isTypeAliasDeclaration(s)) aliases.set(s.name.text, s);
}

function literals(node: ts.TypeNode): string[] | null {
  const members = ts.isUnionTypeNode(node) ? [...node.types] : [node];
  const out: string[] = [];
  for (const m of members) {
    if (!ts.isLiteralTypeNode(m) || !ts.isStringLiteral(m.literal)) return null;
    out.push(m.literal.text);
  }
  return out;
}

describe("the client's types match the OpenAPI document", () => {
  it("every interface is a schema with the same fields", () => {
    assert.ok(interfaces.size >= 25, `${interfaces.size} interfaces`);
    for (const [name, decl] of interfaces) {
      const schema = schemas[name];
      assert.ok(schema, `${name} is not a schema of the document`);
      const props: Record<string, Schema> = schema.properties ?? {};
      const required = new Set<string>(schema.required ?? []);
      const fields = decl.members.filter(ts.isPropertySignature);
      assert.deepEqual(
        fields.map((f) => f.name.getText(source)).sort(),
        Object.keys(props).sort(),
        `${name}: the fields`,
      );
      for (const f of fields) {
        const key = f.name.getText(source);
        const mine = tsProp(f);
        const theirs = schemaProp(props[key]!);
        const where = `${name}.${key}`;
        assert.equal(mine.optional, !required.has(key), `${where}: required in the document ⇔ not optional here`);
        assert.equal(mine.nullable, theirs.nullable, `${where}: nullable`);
        assert.equal(mine.kind, theirs.kind, `${where}: the kind of value`);
      }
    }
  });

  it("every string union is the schema's enum", () => {
    let checked = 0;
    for (const [name, decl] of aliases) {
      const values = literals(decl.type);
      if (!values) continue;
      const schema = schemas[name];
      assert.ok(schema?.enum, `${name} is not an enum of the document`);
      assert.deepEqual([...values].sort(), [...schema.enum].sort(), name);
      checked++;
    }
    assert.ok(checked >= 10, `${checked} enums`);
  });

  it("the Event union has the document's tags and types", () => {
    const mine = new Map<string, string>();
    const decl = aliases.get("Event")!;
    assert.ok(ts.isUnionTypeNode(decl.type));
    for (const member of decl.type.types) {
      const inner = ts.isParenthesizedTypeNode(member) ? member.type : member;
      assert.ok(ts.isIntersectionTypeNode(inner), member.getText(source));
      const [tag, ref] = inner.types;
      const literal = (tag as ts.TypeLiteralNode).members[0] as ts.PropertySignature;
      mine.set(literals(literal.type!)![0]!, ref!.getText(source));
    }
    const theirs = new Map<string, string>();
    for (const member of schemas.Event!.oneOf) {
      const [ref, tag] = member.allOf;
      theirs.set(tag.properties.type.enum[0], ref.$ref.split("/").at(-1));
    }
    assert.deepEqual(mine, theirs);
  });

  it("every schema is mirrored or named as not in the client", () => {
    for (const name of Object.keys(schemas)) {
      const mirrored = interfaces.has(name) || aliases.has(name);
      assert.ok(mirrored !== (name in NOT_MIRRORED), `${name}: mirror it in src/types.ts or add it to NOT_MIRRORED`);
    }
  });
});
