# The hyperhive hive daemon as a NixOS service (`services.hyperhive`).
#
# Owns: the `hyperhive-hive` unit, the `hyperhive` system user and group
# (the group may use the operator API socket /run/hyperhive/hive.sock), the hive's
# TOML config (generated from the options, checked at build time by
# `hive --check-config`), and /etc/hyperhive/hive.toml for the operator CLI.
#
# Invariants: secrets reach the daemon only through LoadCredential, never the
# Nix store; the unit is Type=notify, so "active" means the daemon said
# READY=1 (its operator API socket listens) and a hung daemon is killed by the
# watchdog. The unit talks to dockerd, which is root-equivalent access to the
# host (see docs/nixos.md).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption mkEnableOption types;
  common = import ./common.nix { inherit lib; };

  cfg = config.services.hyperhive;
  toml = pkgs.formats.toml { };
  unit = "hyperhive-hive";
  user = "hyperhive";

  secrets = common.unitSecrets {
    prefix = "services.hyperhive";
    inherit cfg;
    files = {
      "xkey.seed" = "xkeySeedFile";
      "registry-auth.json" = "registryAuthFile";
    };
  };

  # The options that map onto the config file, with secret paths written by
  # `secretPath` (the LoadCredential copy for the unit, the file itself for
  # the operator's copy in /etc).
  typedSettings =
    secretPath:
    let
      secret = common.optionalSecretPath secretPath;
    in
    common.withoutNulls {
      name = cfg.hiveName;
      state_dir = cfg.stateDir;
      http_listen = cfg.httpListen;
      nats = common.natsSettings {
        inherit (cfg) nats;
        inherit secretPath;
      };
      xkey_seed_file = secret "xkey.seed" cfg.xkeySeedFile;
      trusted_controller_xkeys = cfg.trustedControllerXkeys;
      # The operator API: a socket in the unit's RuntimeDirectory (0750),
      # mode 0660, group hyperhive. Operators join that group.
      api_socket = apiSocket;
      api_socket_group = user;
      registry_auth_file = secret "registry-auth.json" cfg.registryAuthFile;
    };

  configFile = toml.generate "hyperhive-hive.toml" cfg.settings;
  operatorConfigFile = toml.generate "hyperhive-hive-operator.toml" (
    lib.recursiveUpdate cfg.settings (typedSettings common.hostSecretPath)
  );

  checkCommand = "hive --check-config";
  checkedConfigFile = common.checkedConfig {
    inherit
      pkgs
      cfg
      secrets
      configFile
      unit
      checkCommand
      ;
    name = "hyperhive-hive-checked.toml";
  };

  underVarLib = lib.hasPrefix "/var/lib/" cfg.stateDir;
  apiSocket = "/run/hyperhive/hive.sock";
in
{
  options.services.hyperhive = {
    enable = mkEnableOption "the hyperhive hive daemon, which runs this host's agents in Docker";

    package = common.packageOption pkgs "hive";

    hiveName = mkOption {
      type = types.str;
      default = config.networking.hostName;
      defaultText = lib.literalExpression "config.networking.hostName";
      example = "alpha";
      description = ''
        This hive's name in the swarm: a DNS label (lowercase letters, digits
        and '-'). The name rule lives in the daemon; `hive --check-config`
        enforces it at build time. When the swarm module is imported too, the
        name must be a key of services.hyperhive.swarm.hives.
      '';
    };

    stateDir = mkOption {
      type = common.absolutePath;
      default = "/var/lib/hyperhive";
      description = ''
        The hive's state: SQLite job store, agents' state and delivered
        credentials, the generated xkey seed. Under /var/lib it is the unit's
        StateDirectory; elsewhere it is created by tmpfiles.
      '';
    };

    httpListen = mkOption {
      type = types.str;
      default = "127.0.0.1:7390";
      description = ''
        Address of the local API, /health/ready, /health/live and /metrics.
        Keep it on loopback: the local API drives the hive.
      '';
    };

    nats = common.natsOptions { example = "nats://nats.example:4222"; };

    xkeySeedFile = common.secretFileOption "hive-xkey.seed" ''
      The hive's xkey seed, which opens credentials sealed for it. Leave null
      to let the hive generate one under stateDir at first start'';

    registryAuthFile = common.secretFileOption "registry-auth.json" ''
      Registry logins for image pulls: a Docker config.json, the file
      `docker login` writes ({"auths": {"host:port": {"auth": base64 of
      user:password}}}, or `username` and `password` per entry). The hive
      sends the login of an image's registry with its pull and never logs or
      publishes it. The LoadCredential copy is taken at unit start: restart
      the unit after changing the file'';

    trustedControllerXkeys = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "XBS4GAOEODUKKR7LRFIOVJNYOC5EUSKQUB7FAISNU2NZ77JWDBPQQXVZ" ];
      description = ''
        Public xkeys of the controllers allowed to seal credentials for this
        hive. The swarm module adds services.hyperhive.swarm.controller.xkey.
      '';
    };

    watchdogSec = mkOption {
      type = types.ints.positive;
      default = 60;
      description = "systemd WatchdogSec; the hive pings every half of it.";
    };
  }
  // common.configOptions {
    inherit toml checkCommand checkedConfigFile;
    unitName = "hive";
    settingsExample = lib.literalExpression ''
      {
        publish_interval_secs = 60;
        knowledge_repo = "/srv/git/knowledge.git";
        nats.buckets.status.replicas = 3;
        port_addresses = [ "127.0.0.1" "10.0.0.5" ];
        volume_roots = [ "/srv/hyperhive" ];
      }
    '';
    settingsDescription = ''
      The hive's TOML config (docs/nixos.md lists the keys). The options
      above fill name, state_dir, http_listen, [nats], xkey_seed_file and
      trusted_controller_xkeys; set other keys here. Secrets go through the
      *File options, never here.
    '';
  };

  config = lib.mkIf cfg.enable {
    assertions = common.secretAssertions secrets ++ common.natsAssertions "services.hyperhive" cfg.nats;

    services.hyperhive.settings = typedSettings (common.unitSecretPath unit);

    virtualisation.docker.enable = lib.mkDefault true;

    users.users.${user} = {
      isSystemUser = true;
      group = user;
      home = cfg.stateDir;
      description = "hyperhive hive daemon";
    };
    users.groups.${user} = { };

    systemd.tmpfiles.rules = lib.optional (!underVarLib) "d ${cfg.stateDir} 0700 ${user} ${user} -";

    environment.systemPackages = [ cfg.package ];
    # `hive agents|jobs|deploy|…` find the socket without --api; members of
    # the hyperhive group (users.users.<you>.extraGroups) may use it.
    environment.variables.HYPERHIVE_API = apiSocket;
    # The same config with the secret files' own paths, for the operator's
    # `hive --config /etc/hyperhive/hive.toml ...` run as root.
    environment.etc."hyperhive/hive.toml".source = operatorConfigFile;

    systemd.services.${unit} = {
      description = "hyperhive hive ${cfg.hiveName}";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      requires = [
        "docker.service"
        "network-online.target"
      ];
      after = [
        "docker.service"
        "network-online.target"
      ];
      # The knowledge repo is pulled with git.
      path = [ pkgs.git ];

      serviceConfig = common.hardening // {
        Type = "notify";
        NotifyAccess = "main";
        WatchdogSec = cfg.watchdogSec;
        ExecStart = "${cfg.package}/bin/hive run --config ${cfg.configFile}";
        Restart = "on-failure";
        RestartSec = 5;

        User = user;
        Group = user;
        # dockerd's socket belongs to the docker group. Membership is
        # root-equivalent: whoever talks to dockerd can mount / into a
        # container. The hardening below limits the daemon itself, not
        # what it can ask dockerd to do.
        SupplementaryGroups = [ "docker" ];

        LoadCredential = common.loadCredential secrets;
        StateDirectory = lib.mkIf underVarLib (lib.removePrefix "/var/lib/" cfg.stateDir);
        StateDirectoryMode = "0700";
        # /run/hyperhive: the operator API's socket, reachable by the group.
        RuntimeDirectory = "hyperhive";
        RuntimeDirectoryMode = "0750";
        ReadWritePaths = [ cfg.stateDir ];
      };
    };
  };
}
