# The swarm side of hyperhive (`services.hyperhive.swarm`): the fleet-wide
# roster, the controller unit, the declarations, and the nats-server
# accounts that let each hive reach only its own subjects and keys.
#
# Import it on every host of the fleet with the same roster (a shared
# fleet.nix): a hive host then fails to build when its hiveName is not on the
# roster, the nats host builds its accounts from it, and the controller
# host runs the controller. It imports ./hive.nix, so one import gives both.
#
# Owns: the `hyperhive-swarm` unit (the controller), the
# `hyperhive-swarm-declare` oneshot (publishes the declarations), the
# controller's TOML config (checked at build time by
# `swarm-controller --check-config`), /etc/hyperhive/swarm-controller.toml
# and /etc/hyperhive/swarm.toml for the operator CLI, and, with
# swarm.nats.enable, the nats-server config (services.nats plus the
# accounts printed by `swarm-controller nats-config` at build time).
#
# Invariants: secrets reach the daemon only through LoadCredential; subject
# names, permissions and name rules are never written here: they come from
# the controller binary (nats-config, --check-config), which takes them from
# swarm-queue-client.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption mkEnableOption types;
  common = import ./common.nix { inherit lib; };

  cfg = config.services.hyperhive.swarm;
  ctl = cfg.controller;
  hive = config.services.hyperhive;
  toml = pkgs.formats.toml { };
  unit = "hyperhive-swarm";
  declareUnit = "hyperhive-swarm-declare";
  # Both units run as this dynamic user, so they share its UID and the
  # state directory.
  user = "hyperhive-swarm";
  stateDir = "/var/lib/hyperhive-swarm";

  rosterNames = lib.concatStringsSep ", " (lib.attrNames cfg.hives);

  roster = lib.mapAttrs (
    _: h:
    common.withoutNulls {
      labels = if h.labels == { } then null else h.labels;
      inherit (h) nkey;
      jetstream_domain = h.jetstreamDomain;
    }
  ) cfg.hives;

  # The swarm file: one [hives.<hive>.agents.<agent>] table per agent.
  declarationsFile = toml.generate "hyperhive-swarm-declarations.toml" {
    hives = lib.mapAttrs (_: agents: { inherit agents; }) cfg.declarations;
  };

  secrets = common.unitSecrets {
    prefix = "services.hyperhive.swarm.controller";
    cfg = ctl;
    files = {
      "xkey.seed" = "xkeySeedFile";
      "webhook-secret" = "webhookSecretFile";
    };
  };

  typedSettings =
    secretPath:
    common.withoutNulls {
      stale_after_secs = cfg.staleAfterSeconds;
      http_listen = ctl.listen;
      xkey_seed_file =
        if ctl.xkeySeedFile == null then
          "${stateDir}/xkey.seed"
        else
          secretPath "xkey.seed" ctl.xkeySeedFile;
      webhook_secret_file =
        common.optionalSecretPath secretPath "webhook-secret" ctl.webhookSecretFile;
      swarm_file = if cfg.declarations == { } then null else "${declarationsFile}";
      nats = common.natsSettings {
        inherit (ctl) nats;
        inherit secretPath;
      };
      controller = if ctl.nkey == null then null else { inherit (ctl) nkey; };
      hives = roster;
    };

  configFor =
    name: secretPath:
    toml.generate name (lib.recursiveUpdate ctl.settings (typedSettings secretPath));
  configFile = toml.generate "hyperhive-swarm-controller.toml" ctl.settings;
  declareConfigFile = configFor "hyperhive-swarm-declare.toml" (common.unitSecretPath declareUnit);
  operatorConfigFile = configFor "hyperhive-swarm-operator.toml" common.hostSecretPath;

  checkCommand = "swarm-controller --check-config";
  checkedConfigFile = common.checkedConfig {
    inherit
      pkgs
      secrets
      configFile
      unit
      checkCommand
      ;
    cfg = ctl;
    name = "hyperhive-swarm-checked.toml";
  };

  # Only what `nats-config` needs: the roster and the public nkeys. No secret
  # and no server address, so the nats host needs neither.
  rosterConfigFile = toml.generate "hyperhive-roster.toml" (
    common.withoutNulls {
      stale_after_secs = cfg.staleAfterSeconds;
      controller = if ctl.nkey == null then null else { inherit (ctl) nkey; };
      hives = roster;
    }
  );

  natsAuthorization = pkgs.runCommand "hyperhive-nats-accounts.conf" {
    nativeBuildInputs = [ ctl.package ];
  } ''swarm-controller --config ${rosterConfigFile} nats-config > "$out"'';

  # services.nats writes its settings as JSON, which cannot carry the
  # accounts block that nats-config prints. nats-server's config syntax
  # takes `"key": <json>` lines, so the settings are written that way and the
  # block appended; `nats-server -t` then checks the whole file.
  natsBase = lib.concatStrings (
    lib.mapAttrsToList (
      key: value: "${builtins.toJSON key}: ${builtins.toJSON value}\n"
    ) config.services.nats.settings
  );
  natsConfigFile =
    pkgs.runCommand "nats-hyperhive.conf"
      {
        nativeBuildInputs = [ pkgs.nats-server ];
        base = natsBase;
        passAsFile = [ "base" ];
        passthru.authorization = natsAuthorization;
      }
      ''
        cat "$basePath" ${natsAuthorization} > "$out"
        nats-server -t -c "$out"
      '';

  listenPort = lib.toInt (lib.last (lib.splitString ":" ctl.listen));
  hivesWithoutNkey = lib.attrNames (lib.filterAttrs (_: h: h.nkey == null) cfg.hives);
  unrosteredDeclarations = lib.filter (h: !(cfg.hives ? ${h})) (lib.attrNames cfg.declarations);

  # The two units that run the controller binary share all of this.
  controllerService = secretsOf: {
    wants = [ "network-online.target" ];
    after = [ "network-online.target" ];
    serviceConfig = common.hardening // {
      DynamicUser = true;
      User = user;
      Group = user;
      StateDirectory = "hyperhive-swarm";
      StateDirectoryMode = "0700";
      LoadCredential = common.loadCredential secretsOf;
      Restart = "on-failure";
    };
  };
in
{
  imports = [ ./hive.nix ];

  options.services.hyperhive.swarm = {
    hives = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            labels = mkOption {
              type = types.attrsOf types.str;
              default = { };
              example = {
                zone = "eu";
              };
              description = "Labels of this hive, shown by the controller and usable by selectors.";
            };
            nkey = mkOption {
              type = types.nullOr types.str;
              default = null;
              example = "UDXIL452LOQQGCB5SWW7VY2X7TWFDBMB6XKYXQ7BJGXOMOWDWGUVME7Y";
              description = ''
                Public user nkey ("U...") this hive's daemon connects to NATS
                with. The nats-server config puts it in an account of its own
                (named like the hive) that reaches only this hive's subjects
                and keys. The seed stays on the hive
                (services.hyperhive.nats.credentialsFile).
              '';
            };
            jetstreamDomain = mkOption {
              type = types.nullOr types.str;
              default = null;
              example = "hub";
              description = ''
                For a hive on a leaf-node site: the JetStream domain of the
                servers holding the buckets, the same value as that hive's
                services.hyperhive.settings.nats.jetstream_domain. Its
                generated permissions then name `$JS.<domain>.API.…`, as the
                site's nats-server, which enforces them, sees its requests.
              '';
            };
          };
        }
      );
      default = { };
      example = lib.literalExpression ''
        {
          alpha = { labels.zone = "eu"; nkey = "UDXIL452..."; };
          beta.nkey = "UC3Q...";
        }
      '';
      description = ''
        The roster: every hive of the swarm, by name. The controller reports
        freshness and convergence for these; the nats host grants each its
        own subjects.
      '';
    };

    staleAfterSeconds = mkOption {
      type = types.ints.positive;
      default = 120;
      description = ''
        A hive whose status entry is older than this is stale. Keep it at
        least twice the hives' publish interval (60 s by default).
      '';
    };

    declarations = mkOption {
      type = types.attrsOf (types.attrsOf (types.submodule { freeformType = toml.type; }));
      default = { };
      example = lib.literalExpression ''
        {
          alpha.mail-bot = {
            image = "local/mail-bot:1.4";
            command = [ "mail-bot" "--serve" ];
            env.LOG = "info";
            power = "up";
            memory_mb = 256;
            cpus = 0.5;
            credentials = [ "smtp" ];
            on_credential_change = "restart";
            user = "1000:1000";
            stop_grace_secs = 60;
            ports = [ "8025:25/tcp" ];
            volumes = [ { name = "mail-cache"; target = "/cache"; } ];
            restart_on_unhealthy = 3;
          };
        }
      '';
      description = ''
        What each hive runs: hive -> agent -> agent spec (image or build,
        command, env, power, memory_mb, cpus, credentials, health,
        min_running_secs, user, stop_grace_secs, ports, volumes, network,
        restart_on_unhealthy, on_credential_change; see docs/protocol.md).
        Written to the swarm file and published by the
        hyperhive-swarm-declare unit on the controller host. An empty set for
        a hive (`alpha = { }`) is an explicit empty declaration: that hive
        retires all its agents. A hive left out is not touched. The specs are
        checked by `swarm-controller --check-config` at build time.
      '';
    };

    nats = {
      enable = mkEnableOption ''
        services.nats on this host with JetStream and the hyperhive
        accounts, generated from the roster by
        `swarm-controller nats-config` at build time'';
      openFirewall = mkOption {
        type = types.bool;
        default = false;
        description = "Open services.nats.port in the firewall.";
      };
      configFile = mkOption {
        type = types.package;
        readOnly = true;
        default = natsConfigFile;
        defaultText = lib.literalMD "services.nats.settings plus the output of `swarm-controller nats-config`, checked by `nats-server -t`";
        description = "The nats-server config this module runs services.nats with.";
      };
    };

    controller = {
      enable = mkEnableOption "the hyperhive swarm controller on this host";

      package = common.packageOption pkgs "swarm-controller";

      listen = mkOption {
        type = types.str;
        default = "127.0.0.1:7380";
        example = "0.0.0.0:7380";
        description = "Address of the dashboard, JSON API and forge webhook.";
      };

      openFirewall = mkOption {
        type = types.bool;
        default = false;
        description = "Open the port of `listen` in the firewall.";
      };

      nats = common.natsOptions { example = "nats://127.0.0.1:4222"; };

      nkey = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "UDC4DMFGPCSRACQWGMUEZGRPUABKJALTUSOBL4WTN7BSRSFPH7AAOMU4";
        description = ''
          Public user nkey the controller connects to NATS with (its seed is
          controller.nats.credentialsFile). Needed by the nats host's
          accounts.
        '';
      };

      xkey = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "XBS4GAOEODUKKR7LRFIOVJNYOC5EUSKQUB7FAISNU2NZ77JWDBPQQXVZ";
        description = ''
          The controller's public xkey. Every hive host that imports this
          module trusts it to seal credentials
          (services.hyperhive.trustedControllerXkeys).
        '';
      };

      xkeySeedFile = common.secretFileOption "controller-xkey.seed" ''
        The controller's xkey seed, which seals credentials. Leave null to
        use ${stateDir}/xkey.seed, created by the controller'';

      webhookSecretFile = common.secretFileOption "webhook-secret" "The forge webhook's HMAC secret";
    }
    // common.configOptions {
      inherit toml checkCommand checkedConfigFile;
      unitName = "controller";
      settingsExample = lib.literalExpression ''{ knowledge_repo = "org/knowledge"; }'';
      settingsDescription = ''
        The controller's TOML config. The options above fill
        stale_after_secs, http_listen, xkey_seed_file,
        webhook_secret_file, swarm_file, [nats], [controller] and
        [hives.*]; set other keys here. Secrets go through the *File
        options, never here.
      '';
    };
  };

  config = lib.mkMerge [
    {
      assertions = [
        {
          assertion = !(hive.enable && cfg.hives != { }) || cfg.hives ? ${hive.hiveName};
          message = "services.hyperhive.hiveName = \"${hive.hiveName}\" is not on the swarm's roster (services.hyperhive.swarm.hives has: ${rosterNames}). Add services.hyperhive.swarm.hives.${hive.hiveName}, or fix the name.";
        }
        {
          assertion = unrosteredDeclarations == [ ];
          message = "services.hyperhive.swarm.declarations has agents for ${lib.concatStringsSep ", " unrosteredDeclarations}, which services.hyperhive.swarm.hives does not list (it has: ${rosterNames}).";
        }
      ];

      services.hyperhive.trustedControllerXkeys = lib.mkIf (ctl.xkey != null) [ ctl.xkey ];
    }

    (lib.mkIf ctl.enable {
      assertions = common.secretAssertions secrets ++ common.natsAssertions "services.hyperhive.swarm.controller" ctl.nats;

      warnings = lib.optional (
        ctl.openFirewall && (lib.hasPrefix "127." ctl.listen || lib.hasPrefix "[::1]" ctl.listen)
      ) "services.hyperhive.swarm.controller.openFirewall opens port ${toString listenPort}, but the controller listens on loopback (${ctl.listen}).";

      services.hyperhive.swarm.controller.settings = typedSettings (common.unitSecretPath unit);

      networking.firewall.allowedTCPPorts = lib.optional ctl.openFirewall listenPort;

      environment.systemPackages = [ ctl.package ];
      # The config with the secret files' own paths, for the operator's
      # `swarm-controller --config /etc/hyperhive/swarm-controller.toml status`
      # run as root; and the declarations, for `declare` by hand.
      environment.etc."hyperhive/swarm-controller.toml".source = operatorConfigFile;
      environment.etc."hyperhive/swarm.toml".source = declarationsFile;

      systemd.services.${unit} = lib.mkMerge [
        (controllerService secrets)
        {
          description = "hyperhive swarm controller";
          wantedBy = [ "multi-user.target" ];
          serviceConfig = {
            Type = "simple";
            ExecStart = "${ctl.package}/bin/swarm-controller --config ${ctl.configFile} serve";
            RestartSec = 5;
          };
        }
      ];

      # Publishes the declarations on boot and whenever they change. It talks
      # to NATS itself, so it does not wait for the controller.
      systemd.services.${declareUnit} = lib.mkIf (cfg.declarations != { }) (
        lib.mkMerge [
          (controllerService (lib.removeAttrs secrets [ "webhook-secret" ]))
          {
            description = "hyperhive: publish the swarm's declarations";
            wantedBy = [ "multi-user.target" ];
            restartTriggers = [ declarationsFile ];
            serviceConfig = {
              Type = "oneshot";
              RemainAfterExit = true;
              ExecStart = "${ctl.package}/bin/swarm-controller --config ${declareConfigFile} declare ${declarationsFile}";
              RestartSec = 10;
            };
          }
        ]
      );
    })

    (lib.mkIf cfg.nats.enable {
      assertions = [
        {
          assertion = ctl.nkey != null && hivesWithoutNkey == [ ];
          message = "services.hyperhive.swarm.nats.enable builds the nats-server accounts from public nkeys, and some are missing: ${
            lib.concatStringsSep ", " (
              lib.optional (ctl.nkey == null) "services.hyperhive.swarm.controller.nkey"
              ++ map (h: "services.hyperhive.swarm.hives.${h}.nkey") hivesWithoutNkey
            )
          }.";
        }
        {
          assertion = !(config.services.nats.settings ? authorization);
          message = "services.nats.settings.authorization is set, but services.hyperhive.swarm.nats.enable puts every identity in the accounts it generates from the roster (a user of the global account would share no account boundary); remove it.";
        }
        {
          assertion = !(config.services.nats.settings ? accounts);
          message = "services.nats.settings.accounts is set, but services.hyperhive.swarm.nats.enable generates the accounts from the roster (HYPERHIVE for the buckets and the controller, one per hive); remove one of them.";
        }
      ];

      services.nats = {
        enable = lib.mkDefault true;
        jetstream = lib.mkDefault true;
      };
      networking.firewall.allowedTCPPorts = lib.optional cfg.nats.openFirewall config.services.nats.port;
      systemd.services.nats.serviceConfig.ExecStart = lib.mkForce "${pkgs.nats-server}/bin/nats-server -c ${cfg.nats.configFile}";
    })
  ];
}
