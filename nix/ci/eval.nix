# The evaluation cases of .ci/nix-check: the hive and swarm modules through
# lib.evalModules, on the stand-ins of ./stub-nixos.nix and ./stub-pkgs.nix.
#
#   good.*            evaluate; `problems` lists every expectation that failed
#                     (good.fleet: the three nodes of nix/tests/fleet.nix)
#   assertionCases.*  evaluate; each gives the messages of failed assertions
#   typeCases.*       must fail to evaluate with a type error
#
# .ci/nix-check evaluates each attribute separately and checks the outcome.
{
  lib ? import <nixpkgs-lib>,
}:
let
  pkgs = import ./stub-pkgs.nix { inherit lib; };
  keys = import ../tests/keys.nix;

  eval =
    module:
    lib.evalModules {
      modules = [
        ./stub-nixos.nix
        ../swarm.nix
        { _module.args.pkgs = pkgs; }
        module
      ];
    };

  failedAssertions = config: map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);

  # Every host of a fleet imports the same roster.
  fleet = {
    services.hyperhive.swarm = {
      hives = {
        alpha = {
          labels.zone = "eu";
          inherit (keys.alpha) nkey;
        };
        beta = {
          nkey = "UBETA0000000000000000000000000000000000000000000000000000";
          jetstreamDomain = "hub";
        };
      };
      controller = {
        inherit (keys.controller) nkey xkey;
        package = pkgs.fake "swarm-controller-0.1.0" { };
      };
    };
  };

  hiveHost = extra: {
    imports = [
      fleet
      extra
    ];
    networking.hostName = "alpha";
    services.hyperhive = {
      enable = true;
      package = pkgs.fake "hive-0.1.0" { };
      nats = {
        url = "nats://nats.example:4222";
        credentialsFile = "/var/lib/secrets/hyperhive/alpha.nk";
      };
      settings.knowledge_repo = "/srv/git/knowledge.git";
    };
  };

  controllerHost = extra: {
    imports = [
      fleet
      extra
    ];
    services.hyperhive.swarm = {
      controller = {
        enable = true;
        listen = "0.0.0.0:7380";
        openFirewall = true;
        nats = {
          url = "nats://127.0.0.1:4222";
          credentialsFile = "/var/lib/secrets/hyperhive/controller.nk";
        };
        webhookSecretFile = "/var/lib/secrets/hyperhive/webhook";
        settings.knowledge_repo = "org/knowledge";
      };
      declarations.alpha.hello = {
        image = "hhtest/hello:1";
        command = [
          "sleep"
          "3600"
        ];
        power = "up";
        memory_mb = 64;
        on_credential_change = "restart";
        user = "1000:1000";
        stop_grace_secs = 30;
        ports = [ "8080:80/tcp" ];
        network = "none";
        restart_on_unhealthy = 3;
      };
      nats.enable = true;
    };
  };

  # name -> bool; `problems` keeps the names of the false ones.
  expect = checks: lib.attrNames (lib.filterAttrs (_: ok: !ok) checks);

  goodHive = (eval (hiveHost { })).config;
  hiveUnit = goodHive.systemd.services.hyperhive-hive;
  hiveService = hiveUnit.serviceConfig;
  hiveCredentialDir = "/run/credentials/hyperhive-hive.service";

  tlsHive =
    (eval (hiveHost {
      services.hyperhive = {
        nats.tls = {
          required = true;
          caFile = "/etc/ssl/nats-ca.pem";
          certFile = "/var/lib/secrets/hyperhive/alpha.crt";
          keyFile = "/var/lib/secrets/hyperhive/alpha.key";
        };
        xkeySeedFile = "/var/lib/secrets/hyperhive/alpha.xk";
        registryAuthFile = "/var/lib/secrets/hyperhive/registry.json";
      };
    })).config;

  goodController = (eval (controllerHost { })).config;
  controllerUnit = goodController.systemd.services.hyperhive-swarm;
  declareUnit = goodController.systemd.services.hyperhive-swarm-declare;
  natsExecStart = goodController.systemd.services.nats.serviceConfig.ExecStart;
  natsConfigFile = goodController.services.hyperhive.swarm.nats.configFile;
  # The nodes of the NixOS test, evaluated on the same stand-ins: the test
  # cannot run here, but its nodes must type-check against the modules, pass
  # their assertions, and define every unit its script waits for.
  fleetTest = import ../tests/fleet.nix {
    inherit pkgs;
    modules.swarm = ../swarm.nix;
  };
  vmOptions = {
    options.virtualisation = {
      memorySize = lib.mkOption { type = lib.types.ints.positive; };
      diskSize = lib.mkOption { type = lib.types.ints.positive; };
      docker.package = lib.mkOption {
        type = lib.types.package;
        default = pkgs.fake "docker" { };
      };
    };
  };
  fleetNodes = lib.mapAttrs (
    name: node:
    (eval {
      imports = [
        node
        vmOptions
      ];
      networking.hostName = name;
    }).config
  ) fleetTest.nodes;
  # Units the test script waits for, as [ { node; unit; } ].
  awaited = map (m: {
    node = lib.elemAt m 0;
    unit = lib.elemAt m 1;
  }) (lib.filter lib.isList (builtins.split "([a-z]+)\\.wait_for_unit\\(\"([^\"]+)\\.service\"\\)" fleetTest.testScript));
  # Units that NixOS itself provides, outside the stand-ins.
  nixosUnits = [ "docker" ];
in
{
  good = {
    fleet = {
      awaited = awaited;
      failedAssertions = lib.mapAttrs (_: failedAssertions) fleetNodes;
      problems = expect (
        {
          "no node fails an assertion" = lib.all (c: failedAssertions c == [ ]) (lib.attrValues fleetNodes);
          "the script waits for units" = lib.length awaited >= 5;
          "nats runs the hyperhive config" = lib.hasSuffix "nats-hyperhive.conf" fleetNodes.nats.systemd.services.nats.serviceConfig.ExecStart;
          "alpha runs the hive as alpha" = fleetNodes.alpha.services.hyperhive.settings.name == "alpha";
          "the image loads before the hive" = lib.elem "hyperhive-hive.service" fleetNodes.alpha.systemd.services.hyperhive-test-image.before;
          "the hive trusts the controller" = fleetNodes.alpha.services.hyperhive.settings.trusted_controller_xkeys == [ keys.controller.xkey ];
          "the declaration names alpha" = fleetNodes.controller.environment.etc."hyperhive/swarm.toml".source.value.hives.alpha.agents.hello.image == "hhtest/hello:1";
          "the declaration keeps on_credential_change" = goodController.environment.etc."hyperhive/swarm.toml".source.value.hives.alpha.agents.hello.on_credential_change == "restart";
          "the declaration keeps the container fields" =
            let hello = goodController.environment.etc."hyperhive/swarm.toml".source.value.hives.alpha.agents.hello;
            in hello.user == "1000:1000" && hello.stop_grace_secs == 30 && hello.ports == [ "8080:80/tcp" ]
               && hello.network == "none" && hello.restart_on_unhealthy == 3;
        }
        // lib.listToAttrs (
          map (w: {
            name = "${w.node} defines ${w.unit}.service, which the script waits for";
            value = lib.elem w.unit nixosUnits || fleetNodes.${w.node}.systemd.services ? ${w.unit};
          }) awaited
        )
      );
    };

    hive = {
      unit = hiveUnit;
      settings = goodHive.services.hyperhive.settings;
      # The build-time check as the module writes it, and the store path of
      # the config it checks, so .ci/nix-check can run it with a real binary.
      checkScript = goodHive.services.hyperhive.configFile.script;
      uncheckedConfig = toString (pkgs.fake "hyperhive-hive.toml" { });
      failedAssertions = failedAssertions goodHive;
      problems = expect {
        "no failed assertion" = failedAssertions goodHive == [ ];
        "Type=notify with a watchdog" = hiveService.Type == "notify" && hiveService.WatchdogSec == 60;
        "Restart=on-failure" = hiveService.Restart == "on-failure";
        "after and requires docker and network-online" = lib.all (u: lib.elem u hiveUnit.after && lib.elem u hiveUnit.requires) [
          "docker.service"
          "network-online.target"
        ];
        "wants network-online" = lib.elem "network-online.target" hiveUnit.wants;
        "in the docker group" = hiveService.SupplementaryGroups == [ "docker" ];
        "the API socket is group hyperhive under /run/hyperhive" =
          goodHive.services.hyperhive.settings.api_socket == "/run/hyperhive/hive.sock"
          && goodHive.services.hyperhive.settings.api_socket_group == "hyperhive"
          && hiveService.RuntimeDirectory == "hyperhive"
          && hiveService.RuntimeDirectoryMode == "0750"
          && goodHive.users.groups ? hyperhive;
        "StateDirectory" = hiveService.StateDirectory == "hyperhive";
        "git on the path" = map toString hiveUnit.path == [ (toString pkgs.git) ];
        "hardened" =
          hiveService.ProtectSystem == "strict"
          && hiveService.ProtectHome
          && hiveService.PrivateTmp
          && hiveService.NoNewPrivileges
          && hiveService.ProtectKernelTunables
          && hiveService.ReadWritePaths == [ "/var/lib/hyperhive" ];
        "credentials through LoadCredential" =
          hiveService.LoadCredential == [ "nats.creds:/var/lib/secrets/hyperhive/alpha.nk" ];
        "config reads the credential copy" =
          goodHive.services.hyperhive.settings.nats.credentials_file == "${hiveCredentialDir}/nats.creds";
        "operator config reads the file itself" =
          goodHive.environment.etc."hyperhive/hive.toml".source.value.nats.credentials_file
          == "/var/lib/secrets/hyperhive/alpha.nk";
        "trusts the controller's xkey" =
          goodHive.services.hyperhive.settings.trusted_controller_xkeys == [ keys.controller.xkey ];
        "freeform settings kept" =
          goodHive.services.hyperhive.settings.knowledge_repo == "/srv/git/knowledge.git";
        "hive name from hostName" = goodHive.services.hyperhive.settings.name == "alpha";
        "ExecStart runs the checked config" =
          hiveService.ExecStart == "${pkgs.fake "hive-0.1.0" { }}/bin/hive run --config /nix/store/00000000000000000000000000000000-hyperhive-hive-checked.toml";
        "docker enabled" = goodHive.virtualisation.docker.enable;
        "TLS files, xkey seed and registry logins through LoadCredential" =
          failedAssertions tlsHive == [ ]
          && lib.sort lib.lessThan tlsHive.systemd.services.hyperhive-hive.serviceConfig.LoadCredential == [
            "nats-ca.pem:/etc/ssl/nats-ca.pem"
            "nats-tls.crt:/var/lib/secrets/hyperhive/alpha.crt"
            "nats-tls.key:/var/lib/secrets/hyperhive/alpha.key"
            "nats.creds:/var/lib/secrets/hyperhive/alpha.nk"
            "registry-auth.json:/var/lib/secrets/hyperhive/registry.json"
            "xkey.seed:/var/lib/secrets/hyperhive/alpha.xk"
          ]
          && tlsHive.services.hyperhive.settings.nats.tls == {
            required = true;
            ca_file = "${hiveCredentialDir}/nats-ca.pem";
            cert_file = "${hiveCredentialDir}/nats-tls.crt";
            key_file = "${hiveCredentialDir}/nats-tls.key";
          }
          && tlsHive.services.hyperhive.settings.xkey_seed_file == "${hiveCredentialDir}/xkey.seed"
          && tlsHive.services.hyperhive.settings.registry_auth_file == "${hiveCredentialDir}/registry-auth.json";
        "config checked by hive --check-config with credential stand-ins" =
          lib.hasInfix "touch credentials/nats.creds" goodHive.services.hyperhive.configFile.script
          && lib.hasInfix "sed \"s|${hiveCredentialDir}/|$PWD/credentials/|g\"" goodHive.services.hyperhive.configFile.script
          && lib.hasInfix "hive --check-config check.toml" goodHive.services.hyperhive.configFile.script;
      };
    };

    controller = {
      unit = controllerUnit;
      declareUnit = declareUnit;
      settings = goodController.services.hyperhive.swarm.controller.settings;
      natsExecStart = natsExecStart;
      failedAssertions = failedAssertions goodController;
      problems = expect {
        "no failed assertion" = failedAssertions goodController == [ ];
        "serve with the checked config" = lib.hasSuffix "hyperhive-swarm-checked.toml serve" controllerUnit.serviceConfig.ExecStart;
        "webhook secret through LoadCredential" = lib.elem "webhook-secret:/var/lib/secrets/hyperhive/webhook" controllerUnit.serviceConfig.LoadCredential;
        "declare unit has no webhook secret" = !(lib.any (lib.hasPrefix "webhook-secret:") declareUnit.serviceConfig.LoadCredential);
        "declare unit reads its own credential copy" = lib.hasInfix "hyperhive-swarm-declare.toml declare " declareUnit.serviceConfig.ExecStart;
        "roster in the config" = goodController.services.hyperhive.swarm.controller.settings.hives.alpha.labels.zone == "eu";
        "a leaf-site hive's domain in the roster" =
          goodController.services.hyperhive.swarm.controller.settings.hives.beta.jetstream_domain == "hub"
          && !(goodController.services.hyperhive.swarm.controller.settings.hives.alpha ? jetstream_domain);
        "controller nkey in the config" = goodController.services.hyperhive.swarm.controller.settings.controller.nkey == keys.controller.nkey;
        "firewall opened for the listen port and nats" = lib.sort lib.lessThan goodController.networking.firewall.allowedTCPPorts == [ 7380 ];
        "nats runs the combined config" = lib.hasSuffix "nats-hyperhive.conf" natsExecStart;
        "nats gets JetStream" = goodController.services.nats.jetstream;
        "nats config is base settings plus nats-config, checked by nats-server -t" =
          natsConfigFile.env.base == "\"jetstream\": {\"store_dir\":\"/var/lib/nats\"}\n\"port\": 4222\n\"server_name\": \"nats\"\n"
          && lib.hasInfix "nats-server -t -c" natsConfigFile.script
          && lib.hasInfix "${natsConfigFile.env.passthru.authorization}" natsConfigFile.script
          && lib.hasInfix "swarm-controller --config /nix/store/00000000000000000000000000000000-hyperhive-roster.toml nats-config" natsConfigFile.env.passthru.authorization.script;
        "config checked by swarm-controller --check-config" =
          lib.hasInfix "swarm-controller --check-config check.toml" goodController.services.hyperhive.swarm.controller.configFile.script;
      };
    };
  };

  assertionCases = {
    wrongHiveName = failedAssertions (eval (hiveHost { services.hyperhive.hiveName = "gamma"; })).config;
    secretInStore = failedAssertions (eval (hiveHost {
      services.hyperhive.nats.credentialsFile = lib.mkForce "/nix/store/00000000000000000000000000000000-alpha.nk";
    })).config;
    halfTls = failedAssertions (eval (hiveHost { services.hyperhive.nats.tls.certFile = "/etc/ssl/alpha.crt"; })).config;
    unrosteredDeclaration = failedAssertions (eval (controllerHost {
      services.hyperhive.swarm.declarations.gamma.hello.image = "hhtest/hello:1";
    })).config;
    missingNkey = failedAssertions (eval (controllerHost {
      services.hyperhive.swarm.hives.gamma.labels.zone = "us";
    })).config;
    ownAccounts = failedAssertions (eval (controllerHost {
      services.nats.settings.accounts.OTHER.users = [ ];
    })).config;
  };

  typeCases = {
    staleAfterString = (eval (controllerHost { services.hyperhive.swarm.staleAfterSeconds = "soon"; })).config.services.hyperhive.swarm.controller.settings.stale_after_secs;
    labelsNotAttrs = (eval (controllerHost { services.hyperhive.swarm.hives.alpha.labels = "eu"; })).config.services.hyperhive.swarm.controller.settings.hives;
    httpListenNumber = (eval (hiveHost { services.hyperhive.httpListen = 7390; })).config.services.hyperhive.settings.http_listen;
    relativeStateDir = (eval (hiveHost { services.hyperhive.stateDir = "var/lib/hyperhive"; })).config.services.hyperhive.settings.state_dir;
    secretAsNixPath = (eval (hiveHost { services.hyperhive.xkeySeedFile = ./eval.nix; })).config.systemd.services.hyperhive-hive.serviceConfig.LoadCredential;
    openFirewallString = (eval (controllerHost { services.hyperhive.swarm.controller.openFirewall = "yes"; })).config.networking.firewall.allowedTCPPorts;
    declarationNotAttrs = (eval (controllerHost { services.hyperhive.swarm.declarations.alpha = [ "hello" ]; })).config.environment.etc."hyperhive/swarm.toml".source.value;
    settingsFunction = (eval (hiveHost { services.hyperhive.settings.publish_interval_secs = x: x; })).config.services.hyperhive.settings.publish_interval_secs;
  };
}
