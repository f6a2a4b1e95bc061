// Renders /openapi.json: every operation with its parameters, request body and responses.
// Text only (textContent), so nothing in the document can run as code.
"use strict";

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function resolve(doc, schema) {
  if (schema && schema.$ref) return doc.components.schemas[schema.$ref.split("/").pop()] || {};
  return schema || {};
}

function schemaBlock(doc, schema) {
  const pre = el("pre", JSON.stringify(resolve(doc, schema), null, 2));
  const details = el("details");
  details.append(el("summary", schema && schema.$ref ? schema.$ref.split("/").pop() : "schema"), pre);
  return details;
}

function operation(doc, method, path, op) {
  const id = `${method}-${path}`.replace(/[^A-Za-z0-9-]/g, "-");
  const section = el("section", null, { id });
  section.append(el("h2", `${method.toUpperCase()} ${path}`));
  if (op.summary) section.append(el("p", op.summary));
  if (op.description) section.append(el("p", op.description));
  section.append(el("p", op.security ? "Needs an API key." : "No key needed."));
  if (op.parameters && op.parameters.length) {
    section.append(el("h3", "Parameters"));
    const list = el("ul");
    for (const p of op.parameters) {
      const s = resolve(doc, p.schema);
      list.append(el("li", `${p.name} (${p.in}${p.required ? ", required" : ""}): ${s.type || ""} ${s.description || ""}`));
    }
    section.append(list);
  }
  if (op.requestBody) {
    section.append(el("h3", `Request body${op.requestBody.required ? "" : " (optional)"}`));
    for (const [media, content] of Object.entries(op.requestBody.content)) {
      section.append(el("p", media), schemaBlock(doc, content.schema));
    }
  }
  section.append(el("h3", "Responses"));
  const list = el("ul");
  for (const [status, r] of Object.entries(op.responses || {})) {
    const media = Object.keys(r.content || {}).join(", ");
    list.append(el("li", `${status} ${r.description || ""}${media ? ` (${media})` : ""}`));
  }
  section.append(list);
  return section;
}

async function main() {
  const doc = await (await fetch("/openapi.json")).json();
  document.getElementById("intro").append(el("pre", doc.info.description || ""));
  const toc = el("ul");
  const ops = document.getElementById("ops");
  ops.textContent = "";
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const section = operation(doc, method, path, op);
      const item = el("li");
      item.append(el("a", `${method.toUpperCase()} ${path}`, { href: `#${section.id}` }));
      toc.append(item);
      ops.append(section);
    }
  }
  document.getElementById("toc").append(toc);
}

main().catch((e) => {
  document.getElementById("ops").textContent = `Could not read /openapi.json: ${e}`;
});
