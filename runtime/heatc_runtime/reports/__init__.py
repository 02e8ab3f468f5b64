"""Reports and audit: what the rules found, as every backend reports it (docs/report.md).

Modules: `report` (`Report`, `Snapshot`, `Event`, `Verdict`: the result types), `records`
(the ABI's event and snapshot records decoded into them), `audit` (`AuditReport`: confidence
and policy; its JSON Schema is audit.schema.json beside it), `audit_text` (heatc scan's JSON
lines, written while a scan goes on), `overlap` (scanning while the next chunk is read),
`conflicts` (values that disagree across retrieved chunks), `terms` (the term index conflicts
reads), `restated` (a number written in words and restated in digits).

Public surface: the modules above.
"""
