"use strict";
// What the dashboard and the hive page share (served at /assets/page.js).
// Everything a hive or an agent said goes into the page as text
// (textContent), never as markup.
function humanAge(secs) {
  secs = Math.max(0, Math.floor(secs));
  if (secs < 60) return secs + "s";
  const pad = (n) => String(n).padStart(2, "0");
  if (secs < 3600) return Math.floor(secs / 60) + "m" + pad(secs % 60) + "s";
  if (secs < 86400) return Math.floor(secs / 3600) + "h" + pad(Math.floor((secs % 3600) / 60)) + "m";
  return Math.floor(secs / 86400) + "d" + pad(Math.floor((secs % 86400) / 3600)) + "h";
}
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function show(v) {
  if (v === null || v === undefined) return "";
  if (typeof v !== "object") return String(v);
  if (Array.isArray(v)) return v.map(show).join(", ");
  return Object.entries(v).filter(([, x]) => x !== null && x !== undefined)
    .map(([k, x]) => k + "=" + show(x)).join(" ");
}
