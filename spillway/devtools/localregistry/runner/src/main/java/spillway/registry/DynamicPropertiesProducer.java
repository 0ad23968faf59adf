package spillway.registry;

import java.util.List;

import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

/**
 * The bean Apicurio's config-index build extension would make: the list of settings that
 * can be changed at run time. That extension is not on Maven Central, so none can here.
 */
@ApplicationScoped
public class DynamicPropertiesProducer {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList properties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
