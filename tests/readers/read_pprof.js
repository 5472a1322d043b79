// Decodes a pprof profile with the pprof-format package (an independent
// reader): `node read_pprof.js PPROF_FORMAT_DIR FILE.pb.gz` prints JSON.
const fs = require('fs'), zlib = require('zlib');
const { Profile } = require(process.argv[2]);
const profile = Profile.decode(zlib.gunzipSync(fs.readFileSync(process.argv[3])));
const str = (i) => profile.stringTable.strings[Number(i)];
const fn = new Map(profile.function.map(f => [String(f.id), {name: str(f.name), file: str(f.filename), start: Number(f.startLine)}]));
const loc = new Map(profile.location.map(l => [String(l.id), {mapping: String(l.mappingId), lines: l.line.map(x => ({...fn.get(String(x.functionId)), line: Number(x.line)}))}]));
console.log(JSON.stringify({
  sampleTypes: profile.sampleType.map(t => [str(t.type), str(t.unit)]),
  period: Number(profile.period),
  timeNanos: Number(profile.timeNanos || 0), durationNanos: Number(profile.durationNanos || 0),
  mappings: profile.mapping.map(m => str(m.filename)),
  samples: profile.sample.map(s => ({values: s.value.map(Number), labels: Object.fromEntries(s.label.map(l => [str(l.key), l.str ? str(l.str) : Number(l.num)])), stack: s.locationId.map(id => loc.get(String(id)).lines)})),
}));
