#!/usr/bin/env bash
# Type-checks dashboards/gap-auditor.json against Grafana's published schema types
# (npm @grafana/schema) with TypeScript, offline once the two packages are in the cache.
#   scripts/check-dashboard.sh [DASHBOARD.json]
# Installs @grafana/schema and typescript (pinned) into $GAP_AUDITOR_CACHE/npm (default
# ~/.cache/gap-auditor/npm) only when missing; needs node and npm (scripts/test-env.sh
# installs them). Grafana itself cannot run here: the panels' PromQL is proven separately
# against a real Prometheus by tests/observability.rs.
#
# What is checked: the dashboard as a whole against `Dashboard` (with its variables,
# annotations, rows), and each panel against `Panel` with its plugin's own `Options` and
# field config types (stat, timeseries, table, heatmap: another panel type fails until it
# is added below), and every target as a Prometheus query (refId, expr, ...). Object
# literals get TypeScript's excess-property check, so an unknown or misspelled key fails.
# JSON writes the schema's string enums as their values ("absolute", not
# ThresholdsMode.Absolute), so the types are mapped to that JSON form first (`Json<T>`).
# Before trusting a pass, three deliberately broken copies must FAIL (a wrong enum value, an
# unknown key, a missing required option): a check that cannot fail proves nothing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
. "$HERE/lib.sh"

DASHBOARD=${1:-$(dirname "$HERE")/dashboards/gap-auditor.json}
CACHE=${GAP_AUDITOR_CACHE:-$HOME/.cache/gap-auditor}
NPM_DIR=$CACHE/npm
SCHEMA_VERSION=13.2.3
TYPESCRIPT_VERSION=5.9.3

command -v node >/dev/null && command -v npm >/dev/null \
  || die "node and npm are needed (Debian packages nodejs npm; scripts/test-env.sh installs them)"
[[ -f $DASHBOARD ]] || die "no dashboard at $DASHBOARD"

installed() { # package version
  [[ -f $NPM_DIR/node_modules/$1/package.json ]] \
    && [[ $(node -p "require('$NPM_DIR/node_modules/$1/package.json').version") == "$2" ]]
}
if ! installed @grafana/schema "$SCHEMA_VERSION" || ! installed typescript "$TYPESCRIPT_VERSION"; then
  log "installing @grafana/schema@$SCHEMA_VERSION typescript@$TYPESCRIPT_VERSION into $NPM_DIR (npm)"
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-save --no-audit --no-fund --no-package-lock \
    --loglevel=error "@grafana/schema@$SCHEMA_VERSION" "typescript@$TYPESCRIPT_VERSION" >/dev/null
fi

# Inside the cache dir, so that `@grafana/schema` resolves from its node_modules.
WORK=$(mktemp -d "$NPM_DIR/check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The TypeScript source: the types, then `const dashboard: ... = <the JSON>`. `node` writes
# it (JSON is a TypeScript expression), once for the real dashboard and once per broken copy.
node - "$DASHBOARD" "$WORK" <<'JS'
const fs = require('fs');
const [file, work] = process.argv.slice(2);
const dashboard = JSON.parse(fs.readFileSync(file, 'utf8'));
const raw = '@grafana/schema/dist/esm/raw/composable';
const header = `
import type { Dashboard, DataQuery, DataSourceRef, FieldConfigSource, RowPanel, Panel } from '@grafana/schema';
import type { Options as StatOptions } from '${raw}/stat/panelcfg/x/StatPanelCfg_types.gen';
import type { Options as TimeSeriesOptions, FieldConfig as TimeSeriesFieldConfig } from '${raw}/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';
import type { Options as TableOptions, FieldConfig as TableFieldConfig } from '${raw}/table/panelcfg/x/TablePanelCfg_types.gen';
import type { Options as HeatmapOptions, FieldConfig as HeatmapFieldConfig } from '${raw}/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';

/** The JSON form of a schema type: string enums as their values. */
type Json<T> = T extends string ? \`\${T}\`
  : T extends number | boolean | null | undefined ? T
  : T extends ReadonlyArray<infer U> ? Array<Json<U>>
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;

/** A Prometheus target as Grafana's Prometheus data source saves it. */
type PromQuery = Json<DataQuery> & {
  datasource: Json<DataSourceRef>;
  expr: string;
  legendFormat?: string;
  instant?: boolean;
  range?: boolean;
  format?: 'time_series' | 'table' | 'heatmap';
  editorMode?: 'code' | 'builder';
  interval?: string;
};

type PanelOf<Type extends string, O, F> = Omit<Json<Panel>, 'type' | 'options' | 'fieldConfig' | 'targets'> & {
  type: Type;
  datasource: Json<DataSourceRef>;
  options: Json<O>;
  fieldConfig: Json<FieldConfigSource<F>>;
  targets: PromQuery[];
};
type AnyPanel =
  | (Json<RowPanel> & { panels: [] })
  | PanelOf<'stat', StatOptions, {}>
  | PanelOf<'timeseries', TimeSeriesOptions, TimeSeriesFieldConfig>
  | PanelOf<'table', TableOptions, TableFieldConfig>
  | PanelOf<'heatmap', HeatmapOptions, HeatmapFieldConfig>;

type GapAuditorDashboard = Omit<Json<Dashboard>, 'panels'> & { panels: AnyPanel[] };
`;
const write = (name, d) =>
  fs.writeFileSync(`${work}/${name}.ts`,
    `${header}\nexport const dashboard: GapAuditorDashboard = ${JSON.stringify(d, null, 2)};\n` +
    `export const plain: Json<Dashboard> = dashboard;\n`);
write('dashboard', dashboard);

const copy = () => JSON.parse(JSON.stringify(dashboard));
const first = (d, type) => {
  const p = d.panels.find((p) => p.type === type);
  if (!p) throw new Error(`the dashboard has no ${type} panel to break`);
  return p;
};
let d = copy();
first(d, 'stat').options.colorMode = 'rainbow';
write('broken-enum', d);
d = copy();
first(d, 'timeseries').options.legend.showLegendd = true;
write('broken-key', d);
d = copy();
delete first(d, 'stat').options.reduceOptions;
write('broken-missing', d);
JS

cat >"$WORK/tsconfig.json" <<'JSON'
{
  "compilerOptions": {
    "strict": true, "noEmit": true, "skipLibCheck": true, "target": "es2022",
    "module": "esnext", "moduleResolution": "bundler", "types": []
  },
  "include": ["*.ts"]
}
JSON

out=$(cd "$WORK" && node "$NPM_DIR/node_modules/typescript/bin/tsc" -p tsconfig.json 2>&1) || true
fail=0
for broken in broken-enum broken-key broken-missing; do
  if ! grep -q "^$broken\.ts(" <<<"$out"; then
    echo "check-dashboard: the deliberately broken copy $broken.ts type-checks: the check is blind" >&2
    fail=1
  fi
done
if grep -q "^dashboard\.ts(" <<<"$out"; then
  echo "check-dashboard: $DASHBOARD does not match @grafana/schema $SCHEMA_VERSION:" >&2
  grep -A3 "^dashboard\.ts(" <<<"$out" >&2
  fail=1
fi
if grep -v "^broken-" <<<"$out" | grep -q "error TS" && ! grep -q "^dashboard\.ts(" <<<"$out"; then
  echo "check-dashboard: TypeScript failed outside the dashboard:" >&2
  echo "$out" >&2
  fail=1
fi
((fail == 0)) || exit 1
log "$DASHBOARD type-checks against @grafana/schema $SCHEMA_VERSION; the broken copies do not"
