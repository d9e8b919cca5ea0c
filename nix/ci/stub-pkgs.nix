# A stand-in `pkgs` for the evaluation check: only the attributes the
# modules use, each returning a fake derivation (an attribute set with
# type = "derivation" and an outPath) that carries its inputs, so the check
# can look at what would have been built. Nothing here can be built.
#
# formats.toml/json keep nixpkgs' option type (the same recursive value
# type), so `settings` is type-checked as on a real system; `generate` keeps
# the value instead of rendering TOML. callPackage is refused: the check
# passes `package` explicitly, which keeps the default lazy and untouched.
{ lib }:
let
  inherit (lib) types;
  fake = name: extra: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
  } // extra;

  format =
    description:
    { }:
    let
      valueType =
        types.nullOr (
          types.oneOf [
            types.bool
            types.int
            types.float
            types.str
            types.path
            (types.attrsOf valueType)
            (types.listOf valueType)
          ]
        )
        // {
          inherit description;
        };
    in
    {
      type = types.attrsOf valueType;
      generate = name: value: fake name { inherit value; };
    };
in
{
  inherit fake;
  formats.toml = format "TOML value";
  formats.json = format "JSON value";
  runCommand =
    name: env: script:
    fake name { inherit env script; };
  writeText = name: text: fake name { inherit text; };
  callPackage = _: _: throw "stand-in pkgs: callPackage is not available here; give the module's package option a stand-in";
  git = fake "git" { };
  nats-server = fake "nats-server" { };

  # For the nodes of nix/tests/fleet.nix.
  dockerTools.buildImage = args: fake "docker-image-${baseNameOf args.name}.tar.gz" { inherit args; };
  buildEnv = args: fake args.name { inherit args; };
  busybox = fake "busybox" { };
  curl = fake "curl" { };
  jq = fake "jq" { };
  natscli = fake "natscli" { };
}
