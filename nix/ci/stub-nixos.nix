# Stand-ins for the NixOS options that nix/hive.nix and nix/swarm.nix write
# to, so the evaluation check runs on nixpkgs' lib alone: no nixpkgs, no
# store, nothing built. Each option merges the way the NixOS one does where
# it matters (unit lists concatenate, unit scalars must agree); services.nats
# does what the NixOS module does with its settings and ExecStart, so the
# swarm module's override of that ExecStart is exercised.
{ config, lib, ... }:
let
  inherit (lib) mkOption types;
  free = types.submodule { freeformType = types.attrsOf types.anything; };
  strings = mkOption {
    type = types.listOf types.str;
    default = [ ];
  };

  # As NixOS's systemd unitOption: lists concatenate, atoms must be equal.
  unitOption = lib.mkOptionType {
    name = "systemd option";
    merge =
      loc: defs:
      let
        defs' = lib.filterOverrides defs;
      in
      if lib.any (def: lib.isList def.value) defs' then
        lib.concatMap (def: lib.toList def.value) defs'
      else
        lib.mergeEqualOption loc defs';
  };

  service = types.submodule {
    options = {
      description = mkOption {
        type = types.str;
        default = "";
      };
      wantedBy = strings;
      wants = strings;
      requires = strings;
      after = strings;
      before = strings;
      path = mkOption {
        type = types.listOf types.package;
        default = [ ];
      };
      environment = mkOption {
        type = types.attrsOf types.str;
        default = { };
      };
      restartTriggers = mkOption {
        type = types.listOf types.unspecified;
        default = [ ];
      };
      serviceConfig = mkOption {
        type = types.attrsOf unitOption;
        default = { };
      };
    };
  };
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [ ];
    };
    warnings = strings;

    networking.hostName = mkOption {
      type = types.str;
      default = "nixos";
    };
    networking.firewall.allowedTCPPorts = mkOption {
      type = types.listOf types.port;
      default = [ ];
    };

    users.users = mkOption {
      type = types.attrsOf free;
      default = { };
    };
    users.groups = mkOption {
      type = types.attrsOf free;
      default = { };
    };

    systemd.services = mkOption {
      type = types.attrsOf service;
      default = { };
    };
    systemd.tmpfiles.rules = strings;

    environment.etc = mkOption {
      type = types.attrsOf free;
      default = { };
    };
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };
    environment.variables = mkOption {
      type = types.attrsOf types.str;
      default = { };
    };

    virtualisation.docker.enable = mkOption {
      type = types.bool;
      default = false;
    };

    services.nats = {
      enable = mkOption {
        type = types.bool;
        default = false;
      };
      jetstream = mkOption {
        type = types.bool;
        default = false;
      };
      port = mkOption {
        type = types.port;
        default = 4222;
      };
      settings = mkOption {
        type = types.attrsOf types.anything;
        default = { };
      };
    };
  };

  config = lib.mkIf config.services.nats.enable {
    services.nats.settings = {
      server_name = "nats";
      inherit (config.services.nats) port;
      jetstream = lib.optionalAttrs config.services.nats.jetstream { store_dir = "/var/lib/nats"; };
    };
    systemd.services.nats.serviceConfig.ExecStart = "/nix/store/00000000000000000000000000000000-nats-server/bin/nats-server -c <services.nats.settings as JSON>";
  };
}
