{
  description = "hyperhive: a NATS-native swarm controller and the per-host hive daemon";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forEachSystem = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      # Both built from the committed Cargo.lock (nix/package.nix); the
      # modules' default `package` is the same derivation.
      packages = forEachSystem (pkgs: {
        hive = pkgs.callPackage ./nix/package.nix { crate = "hive"; };
        swarm-controller = pkgs.callPackage ./nix/package.nix { crate = "swarm-controller"; };
        default = self.packages.${pkgs.stdenv.hostPlatform.system}.hive;
      });

      # Plain paths, so that importing both (swarm imports hive) is one module.
      nixosModules = {
        hive = ./nix/hive.nix;
        swarm = ./nix/swarm.nix;
        default = ./nix/swarm.nix;
      };

      checks = forEachSystem (pkgs: {
        inherit (self.packages.${pkgs.stdenv.hostPlatform.system}) hive swarm-controller;
        # Three VMs: nats with JetStream, the controller, one hive with Docker.
        fleet = pkgs.testers.runNixOSTest (
          import ./nix/tests/fleet.nix {
            inherit pkgs;
            modules = self.nixosModules;
          }
        );
      });
    };
}
