# One workspace binary (`hive` or `swarm-controller`) built from the
# committed Cargo.lock. The flake's packages and the modules' default
# `package` both come from here, so a module and `nix build .#hive` build
# the very same derivation.
{
  lib,
  rustPlatform,
  crate,
}:
let
  workspace = lib.importTOML ../Cargo.toml;
  descriptions = {
    hive = "hyperhive hive daemon: runs one host's containerised agents";
    swarm-controller = "hyperhive swarm controller: roster, freshness, declarations";
  };
in
rustPlatform.buildRustPackage {
  pname = crate;
  version = workspace.workspace.package.version;

  # Only what cargo needs: a stray target/ or editor file must not change
  # the derivation. Every workspace member has to be there, or cargo cannot
  # load the workspace.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../swarm-queue-client
      ../hive
      ../swarm-controller
      ../tests
    ];
  };

  cargoLock.lockFile = ../Cargo.lock;
  cargoBuildFlags = [ "--package" crate ];
  # Unit tests only: the end-to-end tests need a nats-server and a dockerd,
  # which the build sandbox does not have (CI runs them; the NixOS test
  # in nix/tests/fleet.nix covers the deployed system).
  cargoTestFlags = [
    "--package"
    crate
    "--lib"
  ];

  meta = {
    description = descriptions.${crate};
    license = lib.licenses.asl20;
    mainProgram = crate;
    platforms = lib.platforms.linux;
  };
}
